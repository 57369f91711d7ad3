// The embedded PostgreSQL is supervised by `serve`: a postmaster killed with -9 while clients send
// protected requests is noticed, said in one error line, and started again on the same data
// directory (its stale postmaster.pid included); requests recover by themselves, no key runs twice
// upstream, 503s come only while it is down, and /metrics and /readyz count the restart. Restarts
// that keep failing end the proxy with a message that says where to look.
import fs from 'node:fs';
import path from 'node:path';
import { isRunning, runningPostmaster } from '../../src/embedded/embedded-state';
import { findFreePort } from '../../src/embedded/embedded';
import { logLines, startServe } from '../support/cli-process';
import { embeddedFixture } from '../support/embedded-fixture';
import { until } from '../support/eventually';
import { postJson, send } from '../support/http';
import { startUpstream, type TestUpstream } from '../support/upstream';
import { recordFigures } from '../support/run-report';

let upstream: TestUpstream;
beforeAll(async () => {
  upstream = await startUpstream();
});
afterAll(() => upstream?.close());
const fixture = embeddedFixture(
  'supervised',
  (dataDir) => `listen: { host: 127.0.0.1, port: "\${PROXY_PORT}" }
admin: { host: 127.0.0.1, port: "\${ADMIN_PORT}" }
store: { dataDir: ${dataDir} }
upstreams: { api: { url: ${upstream.url} } }
routes:
  - { name: jobs, match: { method: POST, path: /jobs }, upstream: api, idempotency: { lockTimeout: 30s } }
`,
);

async function serve() {
  const port = await findFreePort();
  const adminPort = await findFreePort();
  const proxy = await startServe(['--config', fixture.configFile], {
    env: { DATABASE_URL: '', PROXY_PORT: String(port), ADMIN_PORT: String(adminPort) },
  });
  fixture.running.push(proxy);
  return {
    proxy,
    url: `http://127.0.0.1:${port}`,
    adminUrl: `http://127.0.0.1:${adminPort}`,
    postmaster: runningPostmaster(fixture.dataDir)!,
  };
}

type Phase = 'up' | 'down' | 'restarted';

interface Sent {
  readonly key: string;
  readonly sentIn: Phase;
  readonly answeredIn: Phase;
  readonly status: number;
}

test('kill -9 of the postmaster: one error line, a restart on the same data dir, requests recover, no key runs twice', async () => {
  const { proxy, url, adminUrl, postmaster } = await serve();
  let phase: Phase = 'up';
  const sent: Sent[] = [];
  let keysAfterRestart = 0;
  let stop = false;
  const restartLine = 'embedded PostgreSQL restarted';

  // Two clients, each sending a new key and then repeating it, until 10 new keys went out after
  // the restart (bounded: at most 1500 requests each).
  const client = async (name: string): Promise<void> => {
    for (let i = 0; i < 1500 && !stop; i++) {
      const key = `${name}-${i}`;
      for (let attempt = 0; attempt < 2; attempt++) {
        const sentIn = phase;
        const response = await postJson(`${url}/jobs`, key, { key });
        sent.push({ key, sentIn, answeredIn: phase, status: response.status });
      }
      if (phase === 'restarted' && ++keysAfterRestart >= 10) stop = true;
    }
  };
  const clients = Promise.all([client('a'), client('b')]);
  await until(
    () => sent.filter((s) => s.status === 201).length >= 20,
    '20 answers before the kill',
  );

  phase = 'down';
  const killedAt = Date.now();
  process.kill(postmaster.pid, 'SIGKILL');
  await proxy.waitFor(
    `embedded PostgreSQL (PID ${postmaster.pid}) exited unexpectedly (signal SIGKILL)`,
  );
  // The killed server left its lock file: the restart must get past it.
  expect(fs.readFileSync(path.join(fixture.dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]).toBe(
    String(postmaster.pid),
  );
  await proxy.waitFor(restartLine);
  phase = 'restarted';
  const restartedAt = Date.now();
  await clients;

  // The connections the kill broke are logged as short lines: code, message, server, and never the
  // pg client object pg-pool attaches to the error (its connection, its queries' SQL).
  const broken = proxy
    .output()
    .split('\n')
    .filter((line) =>
      /"msg":"(idle database connection failed|completion listener lost)/.test(line),
    );
  expect(broken.length).toBeGreaterThan(0);
  for (const line of broken) {
    expect(line.length).toBeLessThan(500);
    expect(line).not.toMatch(/client|SELECT|INSERT|UPDATE/);
    const fields = JSON.parse(line) as Record<string, unknown>;
    expect(fields).toEqual(
      expect.objectContaining({
        error: expect.any(String),
        server: `127.0.0.1:${postmaster.port}`,
      }),
    );
  }
  expect(JSON.parse(broken[0]!)).toEqual(expect.objectContaining({ code: '57P01' }));

  const [exitLine] = logLines(proxy.output(), `embedded PostgreSQL (PID ${postmaster.pid})`);
  expect(exitLine?.level).toBe(50); // error
  const [restarted] = logLines(proxy.output(), restartLine);
  const newPid = Number(restarted?.postmasterPid);
  expect(newPid).not.toBe(postmaster.pid);
  expect(runningPostmaster(fixture.dataDir)).toEqual(
    expect.objectContaining({ pid: newPid, port: postmaster.port }),
  );

  // 503s only while the server was down: answered after the kill (a request in flight at the kill
  // may have been sent just before it), and sent before the restart line. Every request sent after
  // that line was answered by a working store.
  const unavailable = sent.filter((s) => s.status === 503);
  expect(unavailable.filter((s) => s.answeredIn === 'up')).toEqual([]);
  const afterRestart = sent.filter((s) => s.sentIn === 'restarted');
  expect(afterRestart.length).toBeGreaterThanOrEqual(10);
  expect(afterRestart.filter((s) => s.status === 503)).toEqual([]);
  expect(sent.filter((s) => ![201, 409, 503].includes(s.status))).toEqual([]);

  // Every key once more: a claim lost in the crash would run its key a second time now.
  const keys = [...new Set(sent.map((s) => s.key))];
  for (const key of keys) await postJson(`${url}/jobs`, key, { key });
  const executions = new Map<string, number>();
  for (const request of upstream.executions()) {
    const key = String(request.headers['idempotency-key']);
    executions.set(key, (executions.get(key) ?? 0) + 1);
  }
  const twice = [...executions].filter(([, count]) => count > 1);
  expect(twice).toEqual([]);
  // Every key that was ever answered 201 ran exactly once.
  for (const key of new Set(sent.filter((s) => s.status === 201).map((s) => s.key)))
    expect(executions.get(key)).toBe(1);

  const metrics = await send(`${adminUrl}/metrics`, { method: 'GET' });
  expect(metrics.text()).toMatch(/^idempotency_proxy_embedded_postgres_restarts_total 1$/m);
  const ready = await send(`${adminUrl}/readyz`, { method: 'GET' });
  expect(ready.status).toBe(200);
  expect(ready.json().embeddedPostgres).toEqual({
    state: 'running',
    pid: newPid,
    restarts: 1,
    lastExit: 'signal SIGKILL',
  });

  proxy.child.kill('SIGTERM');
  expect(await proxy.exited()).toBe(0);
  expect(proxy.output()).toContain('embedded PostgreSQL stopped');
  expect(isRunning(newPid, 'postgres')).toBe(false);
  recordFigures(__filename, 'kill -9 of the postmaster', {
    downMs: restartedAt - killedAt,
    requests: sent.length,
    answered503: unavailable.length,
    keys: keys.length,
    upstreamExecutions: upstream.executions().length,
  });
}, 90_000);

test('restarts that keep failing end the proxy with exit 1 and say where to look; it claims no stop', async () => {
  const { proxy, postmaster } = await serve();
  const conf = path.join(fixture.dataDir, 'postgresql.conf');
  const original = fs.readFileSync(conf, 'utf8');
  // A setting PostgreSQL refuses: every restart fails at once.
  fs.appendFileSync(conf, '\nshared_buffers = not-a-size\n');
  try {
    process.kill(postmaster.pid, 'SIGKILL');
    const code = await proxy.exited();
    expect(code).toBe(1);
  } finally {
    fs.writeFileSync(conf, original);
  }
  const failures = logLines(proxy.output(), 'embedded PostgreSQL restart ');
  expect(failures.map((line) => line.msg)).toEqual([
    'embedded PostgreSQL restart 1 of 5 failed; trying again in 0.4 s',
    'embedded PostgreSQL restart 2 of 5 failed; trying again in 0.8 s',
    'embedded PostgreSQL restart 3 of 5 failed; trying again in 1.6 s',
    'embedded PostgreSQL restart 4 of 5 failed; trying again in 3.2 s',
  ]);
  const lastLine = proxy.stderr().trim().split('\n').at(-1);
  expect(lastLine).toMatch(
    /^idempotency-proxy: the embedded PostgreSQL exited \(signal SIGKILL\) and 5 restarts in a row failed \(last: .*shared_buffers.*\): read .*embedded-postgres\.log, fix what it says, and start the proxy again, or set DATABASE_URL to a PostgreSQL of your own$/,
  );
  expect(proxy.output()).not.toContain('embedded PostgreSQL stopped');
  expect(proxy.output()).toContain('the embedded PostgreSQL was not running');
}, 90_000);
