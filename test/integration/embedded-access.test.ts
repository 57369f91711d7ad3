// Security regression: the embedded PostgreSQL was open to every local user — `psql -h 127.0.0.1
// -U postgres` with the password `postgres` made anyone a superuser (every stored answer readable,
// replayed answers forgeable, programs run as the server's user), and its socket sat in /tmp. Now its
// password is random and in a 0600 file in the data dir, TCP is 127.0.0.1 only with that password,
// and the socket is in the data dir (0700). Tried as `nobody` by every route, with real processes;
// the proxy itself still connects. Also: the port is kept across restarts while it is free, and a
// data dir made by the older version (password "postgres") is given a password of its own.
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Client } from 'pg';
import { runningPostmaster } from '../../src/embedded/embedded-state';
import { findFreePort } from '../../src/embedded/embedded';
import { installedPostgres, postgresBinaries } from '../../src/embedded/postgres-binaries';
import { serverUser } from '../../src/embedded/server-user';
import { logLines, startServe } from '../support/cli-process';
import { embeddedFixture } from '../support/embedded-fixture';
import { until } from '../support/eventually';
import { postJson } from '../support/http';
import { describeUnless } from '../support/run-report';
import { startUpstream, type TestUpstream } from '../support/upstream';

const asRoot = process.getuid?.() === 0;
const psql = spawnSync('psql', ['--version']).status === 0;
const PASSWORD_FILE = 'idempotency-proxy.password';

let upstream: TestUpstream;
beforeAll(async () => {
  upstream = await startUpstream();
});
afterAll(() => upstream?.close());
// PG_DATA_DIR lets a test serve another data dir (the old-style one) with the same config.
const fixture = embeddedFixture(
  'access',
  (dir) => `listen: { host: 127.0.0.1, port: "\${PROXY_PORT}" }
admin: { host: 127.0.0.1, port: 0 }
store: { dataDir: "\${PG_DATA_DIR:-${dir}}" }
upstreams: { api: { url: ${upstream.url} } }
routes:
  - { name: jobs, match: { method: POST, path: /jobs }, upstream: api, idempotency: {} }
`,
);

/** Serve on the embedded store of `dataDir` (the fixture's by default), on a fresh port. */
async function serve(dataDir = fixture.dataDir) {
  const port = await findFreePort();
  const proxy = await startServe(['--config', fixture.configFile], {
    env: { DATABASE_URL: '', PROXY_PORT: String(port), PG_DATA_DIR: dataDir },
  });
  fixture.running.push(proxy);
  const postmaster = runningPostmaster(dataDir)!;
  return { proxy, url: `http://127.0.0.1:${port}`, pgPort: postmaster.port };
}

async function stop(proxy: Awaited<ReturnType<typeof serve>>['proxy']): Promise<void> {
  proxy.child.kill('SIGTERM');
  expect(await proxy.exited()).toBe(0);
}

/** Logs in over TCP as `postgres`; resolves with the SQLSTATE of the refusal, or 'ok'. */
async function login(port: number, password: string | undefined): Promise<string> {
  const client = new Client({
    host: '127.0.0.1',
    port,
    user: 'postgres',
    database: 'postgres',
    password,
  });
  client.on('error', () => undefined);
  try {
    await client.connect();
    await client.query('SELECT 1');
    return 'ok';
  } catch (error) {
    return (error as { code?: string }).code ?? (error as Error).message;
  } finally {
    await client.end().catch(() => undefined);
  }
}

const passwordOf = (dataDir: string): string =>
  fs.readFileSync(path.join(dataDir, PASSWORD_FILE), 'utf8').trim();
const mode = (file: string): number => fs.statSync(file).mode & 0o777;

test('no well-known password: postgres/postgres is refused on 127.0.0.1, the password file is 0600, the socket is inside the 0700 data dir', async () => {
  const { url, pgPort } = await serve();
  const { dataDir } = fixture;
  expect(await login(pgPort, 'postgres')).toBe('28P01'); // invalid_password
  expect(await login(pgPort, passwordOf(dataDir))).toBe('ok');
  expect(passwordOf(dataDir)).toMatch(/^[A-Za-z0-9_-]{43}$/); // 32 random bytes
  const file = path.join(dataDir, PASSWORD_FILE);
  expect(mode(file)).toBe(0o600);
  expect(fs.statSync(file).uid).toBe(process.getuid!()); // the proxy's user, not the server's
  expect(mode(dataDir)).toBe(0o700);
  // postmaster.pid: line 5 the socket directory, line 6 the listen address.
  const lines = fs.readFileSync(path.join(dataDir, 'postmaster.pid'), 'utf8').split('\n');
  expect(lines[4]).toBe(dataDir);
  expect(lines[5]).toBe('127.0.0.1');
  expect(fs.existsSync(path.join(dataDir, `.s.PGSQL.${pgPort}`))).toBe(true);
  expect(fs.existsSync(`/tmp/.s.PGSQL.${pgPort}`)).toBe(false);
  const hba = fs.readFileSync(path.join(dataDir, 'pg_hba.conf'), 'utf8');
  const rules = hba.split('\n').filter((line) => line.trim() && !line.startsWith('#'));
  expect(rules).toEqual([
    'local   all       all                 peer map=owner',
    'host    all       all   127.0.0.1/32  scram-sha-256',
  ]);
  // And the proxy connects with it.
  expect((await postJson(`${url}/jobs`, 'access-1', {})).status).toBe(201);
}, 60_000);

describeUnless(
  (!asRoot && 'not running as root: cannot switch to the nobody user') ||
    (!psql && 'psql is not installed'),
  'embedded-access.test.ts: the embedded PostgreSQL was not tried as another local user',
)('as nobody, another local user', () => {
  /** Runs `command` as nobody; its exit code and what it printed. */
  const asNobody = (command: string[], env: NodeJS.ProcessEnv = {}) => {
    const result = spawnSync('runuser', ['-u', 'nobody', '--', ...command], {
      encoding: 'utf8',
      env: { PATH: process.env.PATH, ...env },
      timeout: 20_000,
    });
    return { code: result.status, output: `${result.stdout}${result.stderr}` };
  };
  const sql = (target: string[]) => ['psql', '-w', ...target, '-Atc', 'SELECT current_user'];

  test('cannot log in by any route, and the proxy and the operator still can', async () => {
    const { url, pgPort } = await serve();
    const { dataDir } = fixture;
    const port = String(pgPort);

    const known = asNobody(sql([`postgres://postgres:postgres@127.0.0.1:${port}/postgres`]));
    expect(known).toEqual({
      code: 2,
      output: expect.stringContaining('password authentication failed for user "postgres"'),
    });
    const none = asNobody(sql(['-h', '127.0.0.1', '-p', port, '-U', 'postgres']));
    expect(none).toEqual({ code: 2, output: expect.stringContaining('no password supplied') });
    const socket = asNobody(sql(['-h', dataDir, '-p', port, '-U', 'postgres']));
    expect(socket).toEqual({ code: 2, output: expect.stringContaining('Permission denied') });
    const ownName = asNobody(sql(['-h', dataDir, '-p', port]));
    expect(ownName).toEqual({ code: 2, output: expect.stringContaining('Permission denied') });
    const oldSocket = asNobody(sql(['-h', '/tmp', '-p', port, '-U', 'postgres']));
    expect(oldSocket).toEqual({ code: 2, output: expect.stringContaining('No such file') });
    const read = asNobody(['cat', path.join(dataDir, PASSWORD_FILE)]);
    expect(read).toEqual({ code: 1, output: expect.stringContaining('Permission denied') });
    // Its listing, too: the data dir is not enterable.
    expect(asNobody(['ls', dataDir]).output).toContain('Permission denied');

    // The proxy serves; root (the proxy's user) logs in through the socket without a password, and
    // with the password over TCP, as docs/operations.md tells an operator to.
    expect((await postJson(`${url}/jobs`, 'nobody-1', {})).status).toBe(201);
    const viaSocket = execFileSync(
      'psql',
      ['-w', '-h', dataDir, '-p', port, '-U', 'postgres', '-Atc', 'SELECT current_user'],
      { encoding: 'utf8' },
    );
    expect(viaSocket.trim()).toBe('postgres');
    const password = fs.readFileSync(path.join(dataDir, PASSWORD_FILE), 'utf8').trim();
    const viaTcp = execFileSync(
      'psql',
      [
        '-w',
        '-h',
        '127.0.0.1',
        '-p',
        port,
        '-U',
        'postgres',
        '-Atc',
        'SELECT count(*) > 0 FROM idempotency_keys',
      ],
      { encoding: 'utf8', env: { ...process.env, PGPASSWORD: password } },
    );
    expect(viaTcp.trim()).toBe('t');
  }, 60_000);
});

test('the port is kept across restarts of the proxy; a taken one is replaced, and said', async () => {
  const first = await serve();
  await stop(first.proxy);
  const second = await serve();
  expect(second.pgPort).toBe(first.pgPort);
  expect(second.proxy.output()).not.toContain('is taken by another process');
  await stop(second.proxy);

  // Something else takes the port while no proxy runs.
  const holder = net.createServer();
  await new Promise<void>((resolve) => holder.listen(first.pgPort, '127.0.0.1', resolve));
  try {
    const third = await serve();
    expect(third.pgPort).not.toBe(first.pgPort);
    expect(third.proxy.output()).toContain(
      `port ${first.pgPort}, where the embedded PostgreSQL in ${fixture.dataDir} listened last time (${fixture.dataDir}/idempotency-proxy.state), is taken by another process: it listens on ${third.pgPort} now`,
    );
    expect((await postJson(`${third.url}/jobs`, 'moved-port', {})).status).toBe(201);
    await stop(third.proxy);
  } finally {
    holder.close();
  }
  // The new port is the one kept from now on.
  const fourth = await serve();
  expect(fourth.pgPort).not.toBe(first.pgPort);
  expect(fourth.proxy.output()).not.toContain('is taken by another process');
}, 90_000);

describe('a data dir made by the older version (password "postgres", password logins for all)', () => {
  let oldDir: string;
  beforeAll(() => {
    oldDir = fs.mkdtempSync(path.join(os.tmpdir(), 'ip-access-old-'));
  });
  afterAll(async () => {
    const left = runningPostmaster(oldDir);
    if (left) process.kill(left.pid, 'SIGINT');
    await until(() => !runningPostmaster(oldDir), 'the server to stop').catch(() => undefined);
    fs.rmSync(oldDir, { recursive: true, force: true });
  });

  /** initdb as the older version ran it, and a table of data through single-user mode. */
  async function makeOldStyle(dataDir: string): Promise<void> {
    const user = serverUser(() => undefined);
    const { initdb, postgres } = postgresBinaries(installedPostgres(), user);
    const owned = { ...(user ? { uid: user.uid, gid: user.gid } : {}) };
    const pwDir = fs.mkdtempSync(path.join(os.tmpdir(), 'ip-access-pw-'));
    fs.writeFileSync(path.join(pwDir, 'password'), 'postgres\n');
    if (user) {
      for (const target of [dataDir, pwDir, path.join(pwDir, 'password')])
        fs.chownSync(target, user.uid, user.gid);
    }
    try {
      execFileSync(
        initdb,
        [
          `--pgdata=${dataDir}`,
          '--auth=password',
          '--username=postgres',
          `--pwfile=${path.join(pwDir, 'password')}`,
          '--encoding=UTF8',
          '--locale=C',
        ],
        { ...owned, cwd: pwDir, stdio: 'ignore' },
      );
    } finally {
      fs.rmSync(pwDir, { recursive: true, force: true });
    }
    const single = spawn(postgres, ['--single', '-D', dataDir, 'postgres'], {
      ...owned,
      cwd: dataDir,
      stdio: ['pipe', 'ignore', 'ignore'],
    });
    single.stdin.end("CREATE TABLE kept_from_before AS SELECT 'old data'::text AS note\n");
    await new Promise((resolve) => single.once('close', resolve));
  }

  test('is given a random password in place at the next start: the old one is refused, its data kept, the proxy serves', async () => {
    await makeOldStyle(oldDir);
    expect(fs.existsSync(path.join(oldDir, PASSWORD_FILE))).toBe(false);
    expect(fs.readFileSync(path.join(oldDir, 'pg_hba.conf'), 'utf8')).toMatch(
      /^host\s+all\s+all\s+127\.0\.0\.1\/32\s+password$/m,
    );

    const { proxy, url, pgPort } = await serve(oldDir);
    const [upgraded] = logLines(proxy.output(), `the embedded PostgreSQL in ${oldDir} had no`);
    expect(upgraded?.msg).toContain(
      `the embedded PostgreSQL in ${oldDir} had no password file (made by an older version, whose superuser password was "postgres"): it now has a random password, in ${oldDir}/${PASSWORD_FILE}`,
    );
    expect(mode(path.join(oldDir, PASSWORD_FILE))).toBe(0o600);
    expect(await login(pgPort, 'postgres')).toBe('28P01');
    expect(fs.readFileSync(path.join(oldDir, 'pg_hba.conf'), 'utf8')).not.toMatch(
      /\s(password|trust|md5)\s*$/m,
    );
    expect((await postJson(`${url}/jobs`, 'after-upgrade', {})).status).toBe(201);
    const client = new Client({
      host: '127.0.0.1',
      port: pgPort,
      user: 'postgres',
      database: 'postgres',
      password: passwordOf(oldDir),
    });
    await client.connect();
    try {
      const { rows } = await client.query<{ note: string }>('SELECT note FROM kept_from_before');
      expect(rows).toEqual([{ note: 'old data' }]);
    } finally {
      await client.end();
    }
    await stop(proxy);

    // Upgraded once: the next start keeps that password and says nothing.
    const password = passwordOf(oldDir);
    const again = await serve(oldDir);
    expect(again.proxy.output()).not.toContain('had no password file');
    expect(passwordOf(oldDir)).toBe(password);
    expect(again.pgPort).toBe(pgPort);
  }, 120_000);
});
