// A real PgBouncer (Debian's package) of a test's own, in front of a PostgreSQL URL, with one alias
// per pool mode: `<alias>` in the URL's database name picks transaction or session pooling.
import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client } from 'pg';
import { findFreePort } from '../../src/embedded/embedded';
import { serverCommand } from './pg-cluster';

export const PGBOUNCER_BIN = ['/usr/sbin/pgbouncer', '/usr/bin/pgbouncer'].find((file) =>
  fs.existsSync(file),
);

export interface PgBouncerOptions {
  /** The PostgreSQL server behind it. */
  readonly serverUrl: string;
  /** Server connections per (database, user): small, so client connections share them. */
  readonly poolSize?: number;
}

export interface PgBouncer {
  /** URL of the transaction-pooled alias. */
  readonly transactionUrl: string;
  /** URL of the session-pooled alias. */
  readonly sessionUrl: string;
  output(): string;
  close(): Promise<void>;
}

export async function startPgBouncer(options: PgBouncerOptions): Promise<PgBouncer> {
  if (!PGBOUNCER_BIN) throw new Error('pgbouncer is not installed');
  const server = new URL(options.serverUrl);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ip-pgbouncer-'));
  fs.chmodSync(dir, 0o755);
  const port = await findFreePort();
  const target = [
    `host=${server.hostname}`,
    `port=${server.port || 5432}`,
    `dbname=${decodeURIComponent(server.pathname.slice(1)) || 'postgres'}`,
    `user=${decodeURIComponent(server.username) || 'postgres'}`,
    ...(server.password ? [`password=${decodeURIComponent(server.password)}`] : []),
  ].join(' ');
  const ini = `
[databases]
tx = ${target} pool_mode=transaction
; a session holds its server connection: one per client connection
sess = ${target} pool_mode=session pool_size=30

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = ${port}
unix_socket_dir =
; the client's user name is ignored: every alias logs in as the user above
auth_type = any
default_pool_size = ${options.poolSize ?? 2}
max_client_conn = 500
; node-postgres sends statement_timeout (and options, for synchronous_commit) at startup, which
; PgBouncer 1.18 refuses unless told to ignore them
ignore_startup_parameters = statement_timeout,options
server_reset_query = DISCARD ALL
`;
  const iniFile = path.join(dir, 'pgbouncer.ini');
  fs.writeFileSync(iniFile, ini);
  fs.chmodSync(iniFile, 0o644);
  // PgBouncer refuses to run as root: as root it runs as the postgres user.
  const [command, ...args] = serverCommand([PGBOUNCER_BIN, iniFile]);
  const child: ChildProcess = spawn(command!, args, {
    cwd: dir,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (data: Buffer) => (output += data.toString()));
  child.stderr!.on('data', (data: Buffer) => (output += data.toString()));
  const exit = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const base = `postgres://postgres@127.0.0.1:${port}`;
  const bouncer: PgBouncer = {
    transactionUrl: `${base}/tx`,
    sessionUrl: `${base}/sess`,
    output: () => output,
    close: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGINT');
      await exit;
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
  const deadline = Date.now() + 15_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`pgbouncer exited:\n${output}`);
    const client = new Client({ connectionString: bouncer.transactionUrl });
    client.on('error', () => undefined);
    try {
      await client.connect();
      await client.query('SELECT 1');
      await client.end();
      return bouncer;
    } catch (error) {
      await client.end().catch(() => undefined);
      if (Date.now() > deadline) {
        await bouncer.close();
        throw new Error(`pgbouncer never answered: ${String(error)}\n${output}`, { cause: error });
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}
