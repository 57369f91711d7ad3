// PostgreSQL servers of a test's own from Debian's binaries (/usr/lib/postgresql/15/bin): a primary,
// streaming standbys (synchronous or not), promotion, and a crash of the primary, optionally inside a
// network namespace (netns.ts). The embedded server cannot do this: it ships no pg_basebackup.
// As root, every server runs as the `postgres` user (setpriv), which owns its data directory.
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import type { ConnectionOptions } from 'node:tls';
import { Client, type ClientConfig } from 'pg';
import { findFreePort } from '../../src/embedded/embedded';
import { until } from './eventually';

const run = promisify(execFile);

export const DEBIAN_POSTGRES_BIN = '/usr/lib/postgresql/15/bin';

/** Why these servers cannot run here, or undefined when they can. */
export function pgClusterUnavailable(): string | undefined {
  if (!fs.existsSync(path.join(DEBIAN_POSTGRES_BIN, 'pg_basebackup')))
    return `PostgreSQL 15 server binaries are not installed (${DEBIAN_POSTGRES_BIN}; apt-get install postgresql-15)`;
  if (process.getuid?.() === 0 && !serverUserIds())
    return 'running as root, but there is no `postgres` user to run the servers as';
  return undefined;
}

/** The `postgres` user's ids when the suite runs as root (the servers run as it); else undefined. */
export function serverUserIds(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const line = fs
    .readFileSync('/etc/passwd', 'utf8')
    .split('\n')
    .find((entry) => entry.startsWith('postgres:'));
  if (!line) return undefined;
  const [, , uid, gid] = line.split(':');
  return { uid: Number(uid), gid: Number(gid) };
}

/** argv that runs `command` as the server user (when root) inside `netns` (when given). */
export function serverCommand(command: string[], netns?: string): string[] {
  const asUser =
    process.getuid?.() === 0
      ? ['setpriv', '--reuid=postgres', '--regid=postgres', '--clear-groups', '--', ...command]
      : command;
  return netns ? ['ip', 'netns', 'exec', netns, ...asUser] : asUser;
}

export interface PgNodeOptions {
  /** Address the server listens on (and is reached at); 127.0.0.1 unless inside a namespace. */
  readonly host?: string;
  readonly port?: number;
  /** Network namespace the server runs in. */
  readonly netns?: string;
  /** How the test's own connections speak TLS, for a server that refuses plain ones. */
  readonly ssl?: ConnectionOptions;
}

export class PgNode {
  private child: ChildProcess | undefined;
  private exit: Promise<void> | undefined;

  private constructor(
    readonly name: string,
    readonly dataDir: string,
    readonly host: string,
    readonly port: number,
    private readonly netns: string | undefined,
    private readonly logFile: string,
    private readonly ssl: ConnectionOptions | undefined,
  ) {}

  get url(): string {
    return `postgres://postgres@${this.host}:${this.port}/postgres`;
  }

  /**
   * How the test itself connects: over TCP, or through the Unix socket in the data directory when
   * the server is in a namespace the test's own process cannot reach over the network.
   */
  private connection(timeoutMs: number): ClientConfig {
    return this.netns
      ? {
          host: this.dataDir,
          port: this.port,
          user: 'postgres',
          database: 'postgres',
          connectionTimeoutMillis: timeoutMs,
        }
      : { connectionString: this.url, connectionTimeoutMillis: timeoutMs, ssl: this.ssl };
  }

  /** initdb, configured for streaming replication; not started. */
  static async init(name: string, options: PgNodeOptions = {}): Promise<PgNode> {
    const node = await PgNode.empty(name, options);
    await runAs([
      path.join(DEBIAN_POSTGRES_BIN, 'initdb'),
      '-D',
      node.dataDir,
      '-U',
      'postgres',
      '--auth=trust',
      '--no-sync',
      '-E',
      'UTF8',
    ]);
    fs.appendFileSync(
      path.join(node.dataDir, 'pg_hba.conf'),
      'host all all 0.0.0.0/0 trust\nhost replication all 0.0.0.0/0 trust\n',
    );
    node.configure({
      wal_level: 'replica',
      max_wal_senders: '8',
      wal_keep_size: "'128MB'",
      hot_standby: 'on',
      max_connections: '60',
      shared_buffers: "'32MB'",
      // No power failure here: a crash is the postmaster killed (SIGQUIT), the page cache survives.
      fsync: 'off',
      log_min_messages: 'warning',
      // A standby whose primary is gone retries every 5 s by default, which a promotion waits out.
      wal_retrieve_retry_interval: "'200ms'",
    });
    return node;
  }

  /** A streaming standby of `primary` from pg_basebackup; not started. */
  static async standbyOf(
    primary: PgNode,
    name: string,
    options: PgNodeOptions & { via?: { host: string; port: number } } = {},
  ): Promise<PgNode> {
    const node = await PgNode.empty(name, options);
    // The replication link: straight to the primary, or through a forwarder the test controls.
    const link = options.via ?? primary;
    try {
      await runAs(
        [
          path.join(DEBIAN_POSTGRES_BIN, 'pg_basebackup'),
          '-h',
          link.host,
          '-p',
          String(link.port),
          '-U',
          'postgres',
          '-D',
          node.dataDir,
          '-X',
          'stream',
          '-R',
          '--no-sync',
        ],
        options.netns,
      );
    } catch (error) {
      fs.rmSync(node.dataDir, { recursive: true, force: true });
      throw error;
    }
    // application_name is what synchronous_standby_names names. In postgresql.auto.conf, after the
    // primary_conninfo that -R wrote there (the later line wins).
    fs.appendFileSync(
      path.join(node.dataDir, 'postgresql.auto.conf'),
      `primary_conninfo = 'host=${link.host} port=${link.port} user=postgres application_name=${name}'\n`,
    );
    return node;
  }

  private static async empty(name: string, options: PgNodeOptions): Promise<PgNode> {
    // Under the system temp dir, which the server user can reach (as root the mkdtemp is 0700).
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), `ip-pg-${name}-`));
    const ids = process.getuid?.() === 0 ? serverUserIds() : undefined;
    if (ids) fs.chownSync(dataDir, ids.uid, ids.gid);
    fs.chmodSync(dataDir, 0o700);
    const port = options.port ?? (await findFreePort());
    const logFile = `${dataDir}.log`;
    return new PgNode(
      name,
      dataDir,
      options.host ?? '127.0.0.1',
      port,
      options.netns,
      logFile,
      options.ssl,
    );
  }

  /** Appends settings to postgresql.conf (later lines win); the server reads them when it starts. */
  configure(settings: Record<string, string>): void {
    const lines = Object.entries(settings).map(([name, value]) => `${name} = ${value}`);
    fs.appendFileSync(path.join(this.dataDir, 'postgresql.conf'), `${lines.join('\n')}\n`);
  }

  async start(): Promise<void> {
    this.configure({
      listen_addresses: `'${this.host}'`,
      port: String(this.port),
      unix_socket_directories: `'${this.dataDir}'`,
    });
    const log = fs.openSync(this.logFile, 'a');
    const [command, ...args] = serverCommand(
      [path.join(DEBIAN_POSTGRES_BIN, 'postgres'), '-D', this.dataDir],
      this.netns,
    );
    const child = spawn(command!, args, { stdio: ['ignore', log, log] });
    fs.closeSync(log);
    this.child = child;
    this.exit = new Promise((resolve) => child.once('exit', () => resolve()));
    await this.untilReady();
  }

  /** Connects until the server answers (or gives up after 30 s with its log). */
  private async untilReady(): Promise<void> {
    const deadline = Date.now() + 30_000;
    for (;;) {
      if (this.child?.exitCode !== null) throw new Error(`${this.name} exited:\n${this.log()}`);
      const client = new Client(this.connection(1_000));
      client.on('error', () => undefined);
      try {
        await client.connect();
        await client.query('SELECT 1');
        return;
      } catch (error) {
        if (Date.now() > deadline)
          throw new Error(`${this.name} never answered: ${String(error)}\n${this.log()}`, {
            cause: error,
          });
        await new Promise((resolve) => setTimeout(resolve, 100));
      } finally {
        await client.end().catch(() => undefined);
      }
    }
  }

  /** One statement on a connection of its own. */
  async query<R extends Record<string, unknown>>(
    text: string,
    values: unknown[] = [],
  ): Promise<R[]> {
    const client = new Client(this.connection(5_000));
    client.on('error', () => undefined);
    await client.connect();
    try {
      return (await client.query<R>(text, values)).rows;
    } finally {
      await client.end().catch(() => undefined);
    }
  }

  /** Until `check` holds (polled every 50 ms, at most `timeoutMs`). */
  async until(what: string, check: () => Promise<boolean>, timeoutMs = 30_000): Promise<void> {
    await until(check, `${this.name}: ${what}`, { timeoutMs, intervalMs: 50 }).catch(
      (error: unknown) => {
        throw new Error(`${(error as Error).message}\n${this.log()}`, { cause: error });
      },
    );
  }

  /** Until the standby `name` streams from this primary (and is synchronous when `sync`). */
  async untilStreaming(name: string, sync = false): Promise<void> {
    await this.until(`standby ${name} streaming${sync ? ' synchronously' : ''}`, async () => {
      const rows = await this.query<{ state: string; sync_state: string }>(
        'SELECT state, sync_state FROM pg_stat_replication WHERE application_name = $1',
        [name],
      );
      return rows.some((r) => r.state === 'streaming' && (!sync || r.sync_state === 'sync'));
    });
  }

  /** Makes commits wait for the standby `name` (synchronous replication), once it is caught up. */
  async requireSynchronousStandby(name: string): Promise<void> {
    await this.query(`ALTER SYSTEM SET synchronous_standby_names = '${name}'`);
    await this.query('SELECT pg_reload_conf()');
    await this.untilStreaming(name, true);
  }

  /** Ends recovery: the standby becomes a primary that takes writes. */
  async promote(): Promise<void> {
    await this.query('SELECT pg_promote(true, 30)');
    await this.until('promotion', async () => {
      const [row] = await this.query<{ standby: boolean }>('SELECT pg_is_in_recovery() AS standby');
      return row?.standby === false;
    });
  }

  /** Whether the server this node started is still running. */
  get running(): boolean {
    const child = this.child;
    return child !== undefined && child.exitCode === null && child.signalCode === null;
  }

  /** Stops the server: `immediate` is a crash (SIGQUIT, no shutdown checkpoint), `fast` a clean stop. */
  async stop(mode: 'immediate' | 'fast' = 'fast'): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    child.kill(mode === 'immediate' ? 'SIGQUIT' : 'SIGINT');
    await this.exit;
    this.child = undefined;
  }

  log(): string {
    try {
      return fs.readFileSync(this.logFile, 'utf8').split('\n').slice(-30).join('\n');
    } catch {
      return '';
    }
  }

  async dispose(): Promise<void> {
    await this.stop('immediate');
    fs.rmSync(this.dataDir, { recursive: true, force: true });
    fs.rmSync(this.logFile, { force: true });
  }
}

async function runAs(command: string[], netns?: string): Promise<void> {
  const [file, ...args] = serverCommand(command, netns);
  // A data dir under a 0700 parent is unreachable for the server user: run from the temp dir.
  await run(file!, args, { cwd: os.tmpdir(), timeout: 60_000 });
}
