// `workers: 2` on the embedded PostgreSQL: the primary starts the one server and hands its URL to
// the workers; Ctrl-C (SIGINT to the whole process group, workers included) drains once and stops
// everything; a worker that cannot listen stops the cluster at startup with a single process's words.
import fs from 'node:fs';
import { findFreePort } from '../../src/embedded/embedded';
import { runningPostmaster } from '../../src/embedded/embedded-state';
import { logLines, occupiedPort, spawnServe } from '../support/cli-process';
import { embeddedFixture } from '../support/embedded-fixture';
import { until } from '../support/eventually';
import { postJson } from '../support/http';
import { sleep, startUpstream, type TestUpstream } from '../support/upstream';

let upstream: TestUpstream;
beforeAll(async () => {
  upstream = await startUpstream(async (req, res) => {
    await sleep(500);
    res.writeHead(201, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ key: req.headers['idempotency-key'] }));
  });
});
afterAll(() => upstream?.close());
const fixture = embeddedFixture(
  'workers-embedded',
  (dir) => `listen: { host: 127.0.0.1, port: "\${PROXY_PORT}" }
admin: { host: 127.0.0.1, port: "\${ADMIN_PORT:-0}" }
workers: 2
shutdownGrace: 10s
store: { dataDir: ${dir} }
upstreams: { api: { url: ${upstream.url} } }
routes:
  - { name: jobs, match: { method: POST, path: /jobs }, upstream: api, idempotency: {} }
`,
);

test('the embedded PostgreSQL is started once, by the primary; Ctrl-C drains every worker and stops it', async () => {
  const port = await findFreePort();
  const proxy = spawnServe(['--config', fixture.configFile], {
    env: { DATABASE_URL: '', PROXY_PORT: String(port) },
    groupLeader: true,
  });
  fixture.running.push(proxy);
  await proxy.waitFor('workers serving');
  const postmaster = runningPostmaster(fixture.dataDir)!;
  expect(postmaster).toBeDefined();
  const started = logLines(proxy.output(), 'embedded PostgreSQL started');
  expect(started).toHaveLength(1);
  expect(started[0]!.worker).toBeUndefined();

  // Both workers store in it; one request in flight on each when Ctrl-C reaches the group.
  const url = `http://127.0.0.1:${port}/jobs`;
  const inFlight = [0, 1].map((i) => postJson(url, `ctrl-c-${i}`, { i }));
  await until(() => upstream.received.length >= 2, 'both requests to reach the upstream');
  process.kill(-proxy.pid, 'SIGINT');
  expect((await Promise.all(inFlight)).map((r) => r.status)).toEqual([201, 201]);
  expect(await proxy.exited()).toBe(0);
  const output = proxy.output();
  expect(logLines(output, 'worker stopped')).toHaveLength(2);
  expect(logLines(output, 'second signal')).toHaveLength(0);
  expect(logLines(output, 'embedded PostgreSQL stopped')).toHaveLength(1);
  await until(() => !runningPostmaster(fixture.dataDir), 'the embedded server to stop');
  expect(() => process.kill(postmaster.pid, 0)).toThrow();
});

test('a port in use stops the cluster at startup: one line, exit 1, the embedded server stopped', async () => {
  const held = await occupiedPort();
  try {
    const proxy = spawnServe(['--config', fixture.configFile], {
      env: { DATABASE_URL: '', PROXY_PORT: String(held.port) },
    });
    fixture.running.push(proxy);
    expect(await proxy.exited()).toBe(1);
    const lines = proxy
      .stderr()
      .trim()
      .split('\n')
      .filter((line) => line.startsWith('idempotency-proxy:'));
    expect(lines).toEqual([
      `idempotency-proxy: port ${held.port} on 127.0.0.1 is already in use, so the idempotency-proxy server cannot listen: stop the process that holds it, or set listen.port (PROXY_PORT) to a free port`,
    ]);
    expect(runningPostmaster(fixture.dataDir)).toBeUndefined();
  } finally {
    held.close();
  }
  expect(fs.existsSync(fixture.configFile)).toBe(true);
});
