// The embedded PostgreSQL for the bench, owned by this child process so that the postmaster and every
// backend inherit its CPU affinity (run-bench spawns it under `taskset -c 1`, the proxy's core).
// Uses the built proxy's own startEmbeddedPostgres (dist/embedded/embedded.js: root handling, stale pid
// files), then restarts once with pg_stat_statements preloaded so statements can be counted.
// Durability is PostgreSQL's default: fsync on, synchronous_commit on.
// IPC: sends {type:'ready', url, port, postmasterPid, statementsLoaded}; {type:'stop'} → {type:'stopped'}.
// Env: BENCH_PG_DATA_DIR.
import fs from 'node:fs';
import path from 'node:path';
import { Client } from 'pg';

interface EmbeddedDatabase {
  readonly url: string;
  readonly port: number;
  stop(): Promise<void>;
}

interface EmbeddedModule {
  startEmbeddedPostgres(options: { dataDir: string; port?: number }): Promise<EmbeddedDatabase>;
}

// Compiled to dist/bench/pg-server.js: the built proxy is one folder up. Loaded at run time, not
// imported, so the bench never compiles src/.
// eslint-disable-next-line @typescript-eslint/no-require-imports
const embedded = require(path.join(__dirname, '..', 'embedded', 'embedded.js')) as EmbeddedModule;

let server: EmbeddedDatabase | undefined;
let stopping: Promise<void> | undefined;

async function start(dataDir: string): Promise<void> {
  server = await embedded.startEmbeddedPostgres({ dataDir });
  let statementsLoaded = false;
  const client = new Client({ connectionString: server.url });
  client.on('error', () => undefined);
  await client.connect();
  try {
    await client.query(`ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'`);
  } finally {
    await client.end();
  }
  const port = server.port;
  await server.stop();
  try {
    server = await embedded.startEmbeddedPostgres({ dataDir, port });
    statementsLoaded = true;
  } catch {
    // The library would not load: start without it (run-bench then counts transactions instead).
    fs.appendFileSync(
      path.join(dataDir, 'postgresql.auto.conf'),
      "\nshared_preload_libraries = ''\n",
    );
    server = await embedded.startEmbeddedPostgres({ dataDir, port });
  }
  const postmasterPid = Number(
    fs.readFileSync(path.join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0],
  );
  process.send?.({ type: 'ready', url: server.url, port, postmasterPid, statementsLoaded });
}

function stop(): Promise<void> {
  stopping ??= (async () => {
    if (server) await server.stop();
    server = undefined;
  })();
  return stopping;
}

const dataDir = process.env.BENCH_PG_DATA_DIR;
if (!dataDir) {
  process.send?.({ type: 'error', error: 'BENCH_PG_DATA_DIR is not set' });
  process.exit(2);
}
start(dataDir).catch((error: unknown) => {
  process.send?.({
    type: 'error',
    error: error instanceof Error ? (error.stack ?? error.message) : String(error),
  });
  void stop().finally(() => process.exit(1));
});

process.on('message', (message: { type?: string }) => {
  if (message?.type !== 'stop') return;
  void stop().then(() => {
    process.send?.({ type: 'stopped' });
    process.exit(0);
  });
});
const stopAndExit = (): void => void stop().finally(() => process.exit(0));
process.on('SIGTERM', stopAndExit);
process.on('SIGINT', stopAndExit);
process.on('disconnect', stopAndExit);
