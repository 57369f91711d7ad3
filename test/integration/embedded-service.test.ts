// The embedded PostgreSQL behaves like a service, tested with real processes and signals: Ctrl-C
// reaches only the proxy, which drains and then stops the server; a server left by a proxy killed
// with -9 is found and stopped by the next start; a live proxy's server is refused to a second
// proxy in one line, and lent to inspect/prune/migrate; a failed startup stops what it started.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { isRunning, runningPostmaster } from '../../src/embedded/embedded-state';
import { findFreePort } from '../../src/embedded/embedded';
import { logLines, occupiedPort, runCli, spawnServe, startServe } from '../support/cli-process';
import { embeddedFixture } from '../support/embedded-fixture';
import { until } from '../support/eventually';
import { postJson } from '../support/http';
import { startWaitingUpstream, type TestUpstream } from '../support/upstream';

let upstream: TestUpstream;
beforeAll(async () => {
  upstream = await startWaitingUpstream();
});
afterAll(() => upstream?.close());
const fixture = embeddedFixture(
  'embedded',
  (dir) => `listen: { host: 127.0.0.1, port: "\${PROXY_PORT}" }
admin: { host: 127.0.0.1, port: "\${ADMIN_PORT:-0}" }
shutdownGrace: 10s
store: { dataDir: ${dir} }
upstreams: { api: { url: ${upstream.url} } }
routes:
  - { name: jobs, match: { method: POST, path: /jobs }, upstream: api, idempotency: {} }
`,
);
const running = fixture.running;
let dataDir: string;
let configFile: string;
beforeAll(() => ({ dataDir, configFile } = fixture));

/** Serve on the embedded store (no DATABASE_URL), on fresh ports. */
async function serve(options: { groupLeader?: boolean; port?: number } = {}) {
  const port = options.port ?? (await findFreePort());
  const proxy = await startServe(['--config', configFile], {
    env: { DATABASE_URL: '', PROXY_PORT: String(port) },
    groupLeader: options.groupLeader,
  });
  running.push(proxy);
  return { proxy, url: `http://127.0.0.1:${port}`, postmaster: runningPostmaster(dataDir)! };
}

function cli(args: string[]) {
  return runCli([...args, '--config', configFile], {
    env: { DATABASE_URL: '', PROXY_PORT: '1', LOG_FORMAT: 'json' },
  });
}

/** The process group of `pid` (field 5 of /proc/<pid>/stat). */
function processGroupOf(pid: number): number {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[2]);
}

/** Whether the server `pid` exits within 20 s (a shutdown checkpoint on a busy disk takes a while). */
async function gone(pid: number): Promise<boolean> {
  return until(() => !isRunning(pid, 'postgres'), `server ${pid} to exit`, {
    timeoutMs: 20_000,
    intervalMs: 25,
  }).then(
    () => true,
    () => false,
  );
}

test('Ctrl-C (SIGINT to the whole process group) drains the in-flight request, stores it, then stops the server', async () => {
  const { proxy, url, postmaster } = await serve({ groupLeader: true });
  expect(proxy.output()).toContain(`PID ${proxy.pid}: SIGHUP reloads`);
  // The server runs in a process group (and session) of its own: the terminal's SIGINT misses it.
  expect(processGroupOf(postmaster.pid)).not.toBe(processGroupOf(proxy.pid));

  const inFlight = postJson(`${url}/jobs`, 'ctrl-c-1', { refund: 1 }, { 'x-wait': '1500' });
  await until(
    () => upstream.received.some((r) => r.headers['idempotency-key'] === 'ctrl-c-1'),
    'the request to reach the upstream',
  );
  process.kill(-proxy.pid, 'SIGINT');
  const response = await inFlight;
  expect(response.status).toBe(201);
  expect(await proxy.exited()).toBe(0);
  expect(await gone(postmaster.pid)).toBe(true);
  const stopped = proxy.output().indexOf('embedded PostgreSQL stopped');
  expect(stopped).toBeGreaterThan(proxy.output().indexOf('shutting down: draining'));

  // The result was stored: inspect (starting a server of its own, none is running) finds it.
  const inspect = await cli(['inspect', 'ctrl-c-1']);
  expect(inspect.stdout).toMatch(/state\s+completed/);
  expect(inspect.stdout).toMatch(/status\s+201/);
  expect(inspect.code).toBe(0);
  expect(runningPostmaster(dataDir)).toBeUndefined();
}, 60_000);

test('Ctrl-C while the embedded server is still starting stops it too (the exit hook)', async () => {
  const proxy = spawnServe(['--config', configFile], {
    env: { DATABASE_URL: '', PROXY_PORT: String(await findFreePort()) },
    groupLeader: true,
  });
  running.push(proxy);
  // postmaster.pid appears as soon as the postmaster runs, before it accepts connections. It is
  // empty for a moment after it is created: wait for the PID in it, not for the file.
  await until(
    () => runningPostmaster(dataDir) !== undefined || proxy.child.exitCode !== null,
    'a PID in postmaster.pid (or the process to exit)',
    { timeoutMs: 60_000, intervalMs: 5 },
  );
  const { pid } = runningPostmaster(dataDir)!;
  process.kill(-proxy.pid, 'SIGINT');
  expect(await proxy.exited()).toBe(1);
  expect(proxy.output()).toContain('interrupted during startup; stopping');
  expect(await gone(pid)).toBe(true);
}, 60_000);

test('a proxy killed with -9 leaves its server running; the next start stops that orphan and serves', async () => {
  const first = await serve();
  first.proxy.child.kill('SIGKILL');
  await first.proxy.exited();
  expect(isRunning(first.postmaster.pid, 'postgres')).toBe(true);

  const second = await serve();
  expect(second.proxy.output()).toContain(
    `stopping the embedded PostgreSQL (PID ${first.postmaster.pid}, port ${first.postmaster.port}) left running by a proxy that is gone`,
  );
  expect(await gone(first.postmaster.pid)).toBe(true);
  expect(second.postmaster.pid).not.toBe(first.postmaster.pid);
  expect((await postJson(`${second.url}/jobs`, 'after-orphan', {})).status).toBe(201);
}, 60_000);

test('a second proxy on the same data directory exits 1 with one line: owner PID, data dir, what to do', async () => {
  const owner = await serve();
  const second = await runCli(['serve', '--config', configFile], {
    env: { DATABASE_URL: '', PROXY_PORT: String(await findFreePort()) },
  });
  expect(second.code).toBe(1);
  const lines = second.stderr.trim().split('\n');
  expect(lines).toHaveLength(1);
  expect(lines[0]).toContain(`the embedded PostgreSQL in ${dataDir}`);
  expect(lines[0]).toContain(`PID ${owner.proxy.pid}`);
  expect(lines[0]).toContain(`kill ${owner.proxy.pid}`);
  expect(lines[0]).toContain('store.dataDir');
  // The owner and its server are untouched.
  expect(runningPostmaster(dataDir)?.pid).toBe(owner.postmaster.pid);
  expect((await postJson(`${owner.url}/jobs`, 'still-serving', {})).status).toBe(201);
}, 60_000);

test('a proxy waits for an operator command that holds the data dir, and is refused by a proxy that holds it', async () => {
  // Stand-ins for the owner: live node processes recorded in the owner file.
  const holder = (ms: number) => spawn(process.execPath, ['-e', `setTimeout(() => {}, ${ms})`]);
  const own = (pid: number, command: string, shortLived: boolean): void =>
    fs.writeFileSync(
      path.join(dataDir, 'idempotency-proxy.owner'),
      JSON.stringify({ pid, command, since: new Date().toISOString(), shortLived }),
    );

  const starting = holder(30_000);
  own(starting.pid!, 'idempotency-proxy serve', false);
  const refused = await runCli(['serve', '--config', configFile], {
    env: { DATABASE_URL: '', PROXY_PORT: String(await findFreePort()) },
  });
  starting.kill();
  expect(refused.code).toBe(1);
  expect(refused.stderr).toContain(
    `belongs to another running idempotency-proxy, PID ${starting.pid} (idempotency-proxy serve`,
  );

  // The command ends once the proxy says it waits for it (not after a fixed time, which a loaded
  // machine's slow start could outlast): the proxy then goes on and serves.
  const command = holder(30_000);
  const commandExited = new Promise((resolve) => command.once('exit', resolve));
  own(command.pid!, 'idempotency-proxy inspect', true);
  const proxy = spawnServe(['--config', configFile], {
    env: { DATABASE_URL: '', PROXY_PORT: String(await findFreePort()) },
  });
  running.push(proxy);
  await proxy.waitFor('waiting for');
  expect(logLines(proxy.output(), 'waiting for')[0]?.msg).toBe(
    `waiting for "idempotency-proxy inspect" (PID ${command.pid}) to finish with ${dataDir}`,
  );
  expect(proxy.output()).not.toContain('idempotency-proxy listening'); // it waits, holding off
  command.kill();
  await commandExited;
  await proxy.waitFor('idempotency-proxy listening');
}, 60_000);

test('inspect, prune and migrate use the server of a proxy running on the embedded store', async () => {
  const { proxy, url, postmaster } = await serve();
  await postJson(`${url}/jobs`, 'inspect-live', { a: 1 });
  const using = `using the embedded PostgreSQL of the running proxy (PID ${proxy.pid}) on port ${postmaster.port}`;

  const inspect = await cli(['inspect', 'inspect-live']);
  expect(inspect.code).toBe(0);
  expect(inspect.stdout).toMatch(/state\s+completed/);
  expect(inspect.stderr).toContain(using);
  const prune = await cli(['prune']);
  expect(prune.code).toBe(0);
  expect(prune.stderr).toContain(using);
  const migrate = await cli(['migrate']);
  expect(migrate.code).toBe(0);
  expect(migrate.stderr).toContain('store schema already up to date');

  // They leave the proxy's server running.
  expect(runningPostmaster(dataDir)?.pid).toBe(postmaster.pid);
  expect(
    (await postJson(`${url}/jobs`, 'inspect-live', { a: 1 })).headers['idempotent-replayed'],
  ).toBe('true');
}, 60_000);

test('a port in use stops startup with one line naming the port and its variable, and stops the server it started', async () => {
  const { port, close } = await occupiedPort();
  try {
    const result = await runCli(['serve', '--config', configFile], {
      env: { DATABASE_URL: '', PROXY_PORT: String(port), LOG_FORMAT: 'json' },
    });
    expect(result.code).toBe(1);
    expect(result.stderr.trim()).toBe(
      `idempotency-proxy: port ${port} on 127.0.0.1 is already in use, so the idempotency-proxy server cannot listen: stop the process that holds it, or set listen.port (PROXY_PORT) to a free port`,
    );
    const [started] = logLines(result.stdout, 'embedded PostgreSQL started');
    const postmasterPid = Number(started?.postmasterPid);
    expect(postmasterPid).toBeGreaterThan(0);
    expect(await gone(postmasterPid)).toBe(true);
    expect(runningPostmaster(dataDir)).toBeUndefined();
  } finally {
    close();
  }
}, 60_000);

test('clean removes the data dir check names, and refuses while a proxy uses it', async () => {
  const check = await cli(['check']);
  expect(check.stdout).toContain(`store: embedded PostgreSQL at ${dataDir}\n`);
  const { proxy } = await serve();
  const refused = await cli(['clean', '--yes']);
  expect(refused.code).toBe(1);
  expect(refused.stderr).toBe(
    `idempotency-proxy: the embedded PostgreSQL in ${dataDir} is in use by PID ${proxy.pid} (idempotency-proxy serve): stop it first (kill ${proxy.pid}), then run clean again\n`,
  );
  expect(fs.existsSync(path.join(dataDir, 'PG_VERSION'))).toBe(true);
  proxy.child.kill('SIGTERM');
  expect(await proxy.exited()).toBe(0);

  const asked = await cli(['clean']);
  expect(asked.code).toBe(1);
  expect(asked.stdout).toBe(
    `would remove ${dataDir}: the embedded PostgreSQL's data, every stored key with it. Run idempotency-proxy clean --yes to remove it\n`,
  );
  expect(fs.existsSync(path.join(dataDir, 'PG_VERSION'))).toBe(true);
  const removed = await cli(['clean', '--yes']);
  expect(removed.code).toBe(0);
  expect(removed.stdout).toBe(`removed ${dataDir}; the next serve initialises a new one\n`);
  expect(fs.existsSync(dataDir)).toBe(false);
  expect((await cli(['clean', '--yes'])).stdout).toBe(
    `nothing to remove: there is no embedded PostgreSQL data directory at ${dataDir}\n`,
  );
}, 60_000);
