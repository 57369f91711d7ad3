// The store floor: what PostgreSQL itself costs for the two writes a new key needs, with no proxy in
// front. pgbench (from the PostgreSQL packages) runs against the bench's own server, pinned to the
// load core like the load generator, with a script of a bare `INSERT … ON CONFLICT DO NOTHING` of a
// fresh random key and an `UPDATE` of that row, each its own autocommit transaction (a durable commit
// each, as the proxy's claim and completion are), over --connections clients, with prepared
// statements (the proxy sends named ones). The table is the bench's own: a text key, a status, a
// bytea body of the size of the upstream's answer, two timestamps.
//
// Measured like a proxy scenario, between two readings taken after --warmup seconds of pgbench's run:
// CPU of the postmaster and its children from /proc (backends, WAL writer, …; pgbench's own CPU is
// on the load core and shows as `load gen %`), statements from pg_stat_statements, and pgbench's
// per-transaction log for the transactions completed inside the window and their latencies.
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { spawnPinned } from './children';
import type { Pinning } from './environment';
import type { LoadSummary } from './load';
import { foreignPercent, snapshot } from './measure';
import type { BenchOptions } from './options';
import { coreBusyPercent } from './proc-stats';
import type { ScenarioResult } from './report';
import { SCENARIOS } from './scenarios';
import { say, sleep, stack } from './stack';
import type { StoreProbe } from './store-probe';

export const PGBENCH = ['/usr/lib/postgresql/15/bin/pgbench', '/usr/bin/pgbench'].find((file) =>
  fs.existsSync(file),
);

/** The upstream's answer to a POST (upstream-server.ts) once its ids reach six digits: what a completion stores. */
const ANSWER_BODY = '{"id":"re_123456","status":"created"}';

export async function runStoreFloor(
  options: BenchOptions,
  pinning: Pinning,
): Promise<ScenarioResult> {
  const { name, label, expectedStatus } = SCENARIOS['store-floor'];
  const skipped = (why: string): ScenarioResult => ({ name, label, expectedStatus, skipped: why });
  if (!PGBENCH) return skipped('pgbench not found');
  const probe = stack.probe as StoreProbe;
  const store = stack.store;
  if (!store || !stack.tmpDir) return skipped('no store');
  // Our proxies keep their pools open: leave PostgreSQL room for them and the bench's own clients.
  const room = (await probe.connectionRoom()) - 5;
  const clients = Math.min(options.connections, room);
  if (clients < 1) return skipped(`no free connections on the server (${room + 5} left)`);

  const table = `bench_floor_${randomBytes(4).toString('hex')}`;
  await probe.execute(
    `CREATE TABLE ${table} (key text PRIMARY KEY, status smallint, body bytea,
       created_at timestamptz NOT NULL DEFAULT now(), completed_at timestamptz)`,
  );
  const body = `'\\x${Buffer.from(ANSWER_BODY).toString('hex')}'::bytea`;
  const script = path.join(stack.tmpDir, `${table}.sql`);
  fs.writeFileSync(
    script,
    `\\set k random(1, 9000000000000000000)
INSERT INTO ${table} (key) VALUES ('k' || CAST(:k AS text)) ON CONFLICT DO NOTHING;
UPDATE ${table} SET status = 201, body = ${body}, completed_at = now() WHERE key = 'k' || CAST(:k AS text);
`,
  );
  const logPrefix = path.join(stack.tmpDir, `${table}-log`);
  const summaryFile = path.join(stack.tmpDir, `${table}-summary.txt`);
  const summaryFd = fs.openSync(summaryFile, 'w');
  const runS = options.warmupS + options.durationS + 2;
  try {
    const child = spawnPinned(
      'pgbench',
      PGBENCH,
      [
        '-n', // no VACUUM of pgbench's own tables: there are none
        '-M',
        'prepared',
        '-c',
        String(clients),
        '-j',
        '1',
        '-T',
        String(runS),
        '-P',
        '1',
        '-f',
        script,
        '-l',
        `--log-prefix=${logPrefix}`,
        store.url,
      ],
      { core: pinning.load, stdout: summaryFd, cwd: stack.tmpDir },
    );
    child.expectExit();
    // The first progress line: every client has connected and the script runs.
    const started = await new Promise<boolean>((resolve) => {
      const onData = (chunk: Buffer | string): void => {
        if (!String(chunk).includes('progress:')) return;
        child.process.stderr?.off('data', onData);
        resolve(true);
      };
      child.process.stderr?.on('data', onData);
      void child.exited.then(() => resolve(false));
    });
    if (!started)
      return skipped(`pgbench failed: ${child.stderr().split('\n').slice(-3).join(' ')}`);
    await sleep(Math.max(0, options.warmupS - 1) * 1000);
    const pids = {
      proxy: undefined,
      upstream: undefined,
      postmaster: store.postmasterPid,
      load: child.pid,
    };
    const statementsBefore = await probe.read();
    const before = snapshot(pids);
    const fromUs = Date.now() * 1000;
    await sleep(options.durationS * 1000);
    const toUs = Date.now() * 1000;
    const after = snapshot(pids);
    const statementsAfter = await probe.read();
    const code = await child.exited;
    const summary = fs.readFileSync(summaryFile, 'utf8');
    if (code !== 0)
      return skipped(`pgbench exited ${code}: ${child.stderr().split('\n').slice(-2).join(' ')}`);

    const latencies = windowLatencies(logPrefix, child.pid, fromUs, toUs);
    const transactions = latencies.length;
    const windowS = (toUs - fromUs) / 1e6;
    const delta = (which: 'postgres' | 'load'): number | undefined => {
      const from = before.cpu[which];
      const to = after.cpu[which];
      return from === undefined || to === undefined ? undefined : to - from;
    };
    const postgres = delta('postgres');
    const statements = statementsAfter.total - statementsBefore.total;
    const byKind: Record<string, number> = {};
    for (const [kind, count] of Object.entries(statementsAfter.byKind)) {
      const change = count - (statementsBefore.byKind[kind] ?? 0);
      if (change !== 0) byKind[kind] = change;
    }
    const failed = /number of failed transactions: (\d+)/.exec(summary)?.[1];
    const tps = /tps = ([\d.]+)/.exec(summary)?.[1];
    const load: LoadSummary = {
      completed: transactions,
      sent: transactions,
      durationS: windowS,
      latencyMs: {
        p50: percentile(latencies, 0.5) / 1000,
        p90: percentile(latencies, 0.9) / 1000,
        p99: percentile(latencies, 0.99) / 1000,
        max: percentile(latencies, 1) / 1000,
        mean: latencies.reduce((sum, us) => sum + us, 0) / Math.max(1, transactions) / 1000,
      },
      non2xx: 0,
      errors: Number(failed ?? 0),
      timeouts: 0,
      statusCodes: {},
    };
    const loadCpu = delta('load');
    return {
      name,
      label,
      expectedStatus,
      load,
      requestsPerS: transactions / windowS,
      cpuMicrosPerRequest: {
        postgres:
          postgres === undefined || transactions === 0 ? undefined : postgres / transactions,
        loadGenerator:
          loadCpu === undefined || transactions === 0 ? undefined : loadCpu / transactions,
      },
      coreBusyPercent: {
        load:
          pinning.load === undefined
            ? undefined
            : coreBusyPercent(before.cores, after.cores, pinning.load),
        underTest:
          pinning.underTest === undefined
            ? undefined
            : coreBusyPercent(before.cores, after.cores, pinning.underTest),
        loadGenerator: loadCpu === undefined ? undefined : (100 * loadCpu) / (toUs - fromUs),
        foreignOnUnderTest:
          pinning.underTest === undefined
            ? undefined
            : foreignPercent(before, after, pinning.underTest),
      },
      storeRoundTrips: {
        total: statements,
        perRequest: statements / Math.max(1, transactions),
        byKind,
      },
      unexpected: Number(failed ?? 0),
      note:
        `pgbench ${clients} clients, -M prepared, transactions of INSERT … ON CONFLICT DO NOTHING + UPDATE;` +
        ` pgbench's own tps over its whole run ${tps ?? '?'}` +
        (clients < options.connections ? ` (clients capped to the server's free connections)` : ''),
    };
  } finally {
    fs.closeSync(summaryFd);
    await probe
      .execute(`DROP TABLE IF EXISTS ${table}`)
      .catch(() => say(`could not drop ${table}`));
  }
}

/**
 * Latencies (µs) of the transactions pgbench completed inside the window, from its log: one line per
 * transaction, `client transaction latency_us script epoch_s epoch_us`.
 */
function windowLatencies(prefix: string, pid: number, fromUs: number, toUs: number): number[] {
  const dir = path.dirname(prefix);
  const files = fs
    .readdirSync(dir)
    .filter((file) => file.startsWith(`${path.basename(prefix)}.${pid}`))
    .map((file) => path.join(dir, file));
  const latencies: number[] = [];
  for (const file of files) {
    for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
      const fields = line.split(' ');
      if (fields.length < 6) continue;
      const at = Number(fields[4]) * 1e6 + Number(fields[5]);
      if (at >= fromUs && at < toUs) latencies.push(Number(fields[2]));
    }
    fs.rmSync(file, { force: true });
  }
  return latencies.sort((a, b) => a - b);
}

function percentile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0;
}
