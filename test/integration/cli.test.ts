// The built CLI as a user runs it: check, migrate, serve with SIGTERM drain, exit codes 0/1/2, and
// the embedded PostgreSQL default when no database URL is set.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client } from 'pg';
import { findFreePort } from '../../src/embedded/embedded';
import { postJson } from '../support/http';
import {
  type CliResult,
  runCli as runCliProcess,
  startServe as startServeProcess,
} from '../support/cli-process';
import { databaseUrl, uniqueTable } from '../support/proxy';
import { sleep, startWaitingUpstream, type TestUpstream } from '../support/upstream';

let upstream: TestUpstream;
let workDir: string;

beforeAll(async () => {
  upstream = await startWaitingUpstream();
  workDir = fs.mkdtempSync(path.join(os.tmpdir(), 'ip-cli-'));
}, 120_000);

afterAll(async () => {
  await upstream?.close();
  fs.rmSync(workDir, { recursive: true, force: true });
});

function writeConfig(name: string, text: string): string {
  const file = path.join(workDir, name);
  fs.writeFileSync(file, text);
  return file;
}

const validConfig = (): string => `
listen:
  host: 127.0.0.1
  port: \${PROXY_PORT}
admin:
  port: \${ADMIN_PORT:-0}
shutdownGrace: 5s
store:
  table: \${TABLE}
  dataDir: \${DATA_DIR:-.data/unused}
upstreams: { api: { url: ${upstream.url} } }
routes:
  - { name: jobs, match: { method: POST, path: /jobs }, upstream: api, idempotency: {} }
`;

// In workDir, as a person runs it from a project folder.
const runCli = (args: string[], env: NodeJS.ProcessEnv = {}): Promise<CliResult> =>
  runCliProcess(args, { env, cwd: workDir });
const startServe = (args: string[], env: NodeJS.ProcessEnv) =>
  startServeProcess(args, { env, cwd: workDir });

test('check prints the resolved routes and exits 0', async () => {
  const file = writeConfig('ok.yaml', validConfig());
  const result = await runCli(['check', '--config', file], { PROXY_PORT: '1', TABLE: 'keys_ok' });
  expect(result.code).toBe(0);
  expect(result.stdout).toContain('jobs');
  expect(result.stdout).toContain('protected');
});

test('check says where the keys table lives, and reports an unreachable store without failing', async () => {
  const file = writeConfig('topology.yaml', validConfig());
  const env = { PROXY_PORT: '1', TABLE: 'keys_ok' };
  const reached = await runCli(['check', '--config', file], env);
  expect(reached.code).toBe(0);
  expect(reached.stdout).toMatch(/^store topology: (one PostgreSQL|Citus, .*)$/m);
  const closed = await runCli(['check', '--config', file], {
    ...env,
    DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none',
  });
  expect(closed.code).toBe(0);
  expect(closed.stdout).toContain(
    'store topology: not checked, PostgreSQL not reachable (connect ECONNREFUSED 127.0.0.1:1)',
  );
});

test('check warns, and still exits 0, when a write to a protected path reaches a pass-through route', async () => {
  const file = writeConfig(
    'fallthrough.yaml',
    `${validConfig()}  - { name: rest, match: { path: /** }, upstream: api }\n`,
  );
  const result = await runCli(['check', '--config', file], { PROXY_PORT: '1', TABLE: 'keys_ok' });
  expect(result.code).toBe(0);
  expect(result.stdout).toContain(
    'warning: route "jobs" protects POST /jobs, but PUT, PATCH and DELETE /jobs reach pass-through route "rest" unprotected.',
  );
  const quiet = await runCli(['check', '--config', writeConfig('quiet.yaml', validConfig())], {
    PROXY_PORT: '1',
    TABLE: 'keys_ok',
  });
  expect(quiet.stdout).not.toContain('warning:');
});

test('check exits 2 and names file, line and column for broken YAML and unknown keys', async () => {
  const broken = writeConfig('broken.yaml', 'routes:\n  - name: a\n    match: { path: /a\n');
  const result = await runCli(['check', '--config', broken]);
  expect(result.code).toBe(2);
  expect(result.stderr).toMatch(/broken\.yaml:\d+:\d+/);

  const typo = writeConfig(
    'typo.yaml',
    validConfig().replace('shutdownGrace: 5s', 'shutdownGrace: 5s\nshutdownGrase: 5s'),
  );
  const typoResult = await runCli(['check', '--config', typo], {
    PROXY_PORT: '1',
    TABLE: 'keys_ok',
  });
  expect(typoResult.code).toBe(2);
  expect(typoResult.stderr).toMatch(/typo\.yaml:8:1 shutdownGrase/);
});

test('the config file also comes from IDEMPOTENCY_PROXY_CONFIG, and a missing one exits 2', async () => {
  const file = writeConfig('env.yaml', validConfig());
  const viaEnv = await runCli(['check'], {
    IDEMPOTENCY_PROXY_CONFIG: file,
    PROXY_PORT: '1',
    TABLE: 'k',
  });
  expect(viaEnv.code).toBe(0);
  const nope = path.join(workDir, 'nope.yaml');
  const missing = await runCli(['check', '--config', nope]);
  expect(missing.code).toBe(2);
  // One line, the path once, and what to do: a file that is not there is no invalid configuration.
  expect(missing.stderr).toBe(
    `idempotency-proxy: config file not found: ${nope}; pass --config FILE or set IDEMPOTENCY_PROXY_CONFIG (config/proxy.yaml in a clone is the example to start from)\n`,
  );
});

test('an unknown command or option exits 2 with the usage', async () => {
  const result = await runCli(['frobnicate']);
  expect(result.code).toBe(2);
  expect(result.stderr).toContain('Usage: idempotency-proxy');
  expect((await runCli(['--bogus'])).code).toBe(2);
  // A typo gets our words: the option, the likely one, all of them; no quote left open.
  const typo = await runCli(['check', '--confg', 'x.yaml']);
  expect(typo.code).toBe(2);
  expect(typo.stderr.split('\n')[0]).toBe(
    'idempotency-proxy: unknown option --confg (did you mean --config?); the options are --config (-c), --route (-r), --tenant (-t), --body (-b), --yes (-y), --help (-h), --version (-v)',
  );
  const noValue = await runCli(['check', '--config']);
  expect(noValue.stderr.split('\n')[0]).toBe(
    'idempotency-proxy: --config needs a value (--config VALUE)',
  );
  const help = await runCli(['--help']);
  expect(help.code).toBe(0);
  expect(help.stdout).toContain('migrate');
});

test('migrate creates the table and exits 0; an unreachable database exits 1', async () => {
  const table = uniqueTable('cli');
  const file = writeConfig('migrate.yaml', validConfig());
  const result = await runCli(['migrate', '--config', file], {
    DATABASE_URL: databaseUrl(),
    PROXY_PORT: '1',
    TABLE: table,
  });
  expect(result.code).toBe(0);
  const client = new Client({ connectionString: databaseUrl() });
  await client.connect();
  const { rows } = await client.query('SELECT to_regclass($1) AS t', [table]);
  await client.end();
  expect(rows[0].t).toBe(table);

  const down = await runCli(['migrate', '--config', file], {
    DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none',
    PROXY_PORT: '1',
    TABLE: table,
    IDEMPOTENCY_PROXY_DB_WAIT: '0',
  });
  expect(down.code).toBe(1);
}, 60_000);

test('serve drains an in-flight request on SIGTERM, stores its result, and exits 0', async () => {
  const table = uniqueTable('serve');
  const port = await findFreePort();
  const file = writeConfig('serve.yaml', validConfig());
  const serve = await startServe(['--config', file], {
    DATABASE_URL: databaseUrl(),
    PROXY_PORT: String(port),
    TABLE: table,
  });
  const url = `http://127.0.0.1:${port}`;
  const inFlight = postJson(`${url}/jobs`, 'drain-1', { a: 1 }, { 'x-wait': '800' });
  await sleep(200);
  serve.child.kill('SIGTERM');
  const response = await inFlight;
  expect(response.status).toBe(201);
  expect(await serve.exited()).toBe(0);
  const client = new Client({ connectionString: databaseUrl() });
  await client.connect();
  const { rows } = await client.query(`SELECT state, status FROM "${table}" WHERE key = 'drain-1'`);
  await client.end();
  expect(rows).toEqual([{ state: 'completed', status: 201 }]);
}, 60_000);

test('serve starts an embedded PostgreSQL when no database URL is set, and stops it on exit', async () => {
  const port = await findFreePort();
  // Its own temp dir as the data dir: as root the server runs as `postgres`, which cannot enter the
  // 0700 workDir (and the proxy no longer opens up parent directories for it).
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'ip-cli-pg-'));
  const file = writeConfig('embedded.yaml', validConfig());
  const env = {
    DATABASE_URL: '',
    PROXY_PORT: String(port),
    TABLE: 'idempotency_keys',
    DATA_DIR: dataDir,
  };
  const { child, output, exited } = await startServe(['--config', file], env);
  expect(output()).toContain('starting the embedded PostgreSQL');
  const url = `http://127.0.0.1:${port}`;
  const first = await postJson(`${url}/jobs`, 'embedded-1', {});
  const again = await postJson(`${url}/jobs`, 'embedded-1', {});
  expect(first.status).toBe(201);
  expect(again.headers['idempotent-replayed']).toBe('true');
  child.kill('SIGINT');
  expect(await exited()).toBe(0);
  expect(output()).toContain('embedded PostgreSQL stopped');
  expect(fs.existsSync(path.join(dataDir, 'PG_VERSION'))).toBe(true);
  expect(fs.existsSync(path.join(dataDir, 'postmaster.pid'))).toBe(false);
  fs.rmSync(dataDir, { recursive: true, force: true });
}, 120_000);
