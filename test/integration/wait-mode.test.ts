// onConcurrent: wait — a repeat of an in-flight key blocks until the first completes, then replays it;
// woken by LISTEN/NOTIFY, with polling as the backstop when the listener is down. Where the first
// request runs on another instance (`other`, same table), the repeat waits through the store; a
// repeat of a key its own instance is forwarding joins that request in memory (key-storm.test.ts).
import http from 'node:http';
import { eventually, until } from '../support/eventually';
import { postJson } from '../support/http';
import { startProxy, type TestProxy } from '../support/proxy';
import { sleep, startUpstream, type TestUpstream } from '../support/upstream';

let upstream: TestUpstream;
let proxy: TestProxy;
let other: TestProxy;

beforeAll(async () => {
  upstream = await startUpstream(async (req, res) => {
    await sleep(Number(req.headers['x-wait'] ?? 0));
    const status = Number(req.headers['x-status'] ?? 201);
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({
        execution: upstream.executions().length,
        key: req.headers['idempotency-key'],
      }),
    );
  });
  proxy = await startProxy({ yaml: yaml() });
  other = await startProxy({ yaml: yaml(), table: proxy.table });
});

afterAll(async () => {
  await other?.close();
  await proxy?.close();
  await upstream?.close();
});

beforeEach(() => {
  upstream.received.length = 0;
});

const statementsBefore = () => proxy.listener.stats.notifications;

function yaml(): string {
  return `
store:
  table: \${TEST_TABLE}
upstreams: { api: { url: ${upstream.url} } }
defaults: { onConcurrent: wait, waitTimeout: 3s, lockTimeout: 30s }
routes:
  - { name: jobs, match: { path: /jobs }, upstream: api, idempotency: {} }
  - { name: impatient, match: { path: /impatient }, upstream: api, idempotency: { waitTimeout: 300ms } }
`;
}

/** Resolves once the upstream has received a request with this key (the first is in flight). */
async function reachedUpstream(key: string): Promise<void> {
  await until(
    () => upstream.received.some((r) => r.headers['idempotency-key'] === key),
    `${key} to reach the upstream`,
    { intervalMs: 10 },
  );
}

test('a repeat waits for the in-flight request and gets its stored response, woken by NOTIFY', async () => {
  const notifications = statementsBefore();
  const first = postJson(`${other.url}/jobs`, 'wait-1', { a: 1 }, { 'x-wait': '600' });
  await reachedUpstream('wait-1');
  const repeat = await postJson(`${proxy.url}/jobs`, 'wait-1', { a: 1 });
  const original = await first;
  expect(original.status).toBe(201);
  expect(repeat.status).toBe(201);
  expect(repeat.headers['idempotent-replayed']).toBe('true');
  expect(repeat.body.equals(original.body)).toBe(true);
  expect(upstream.executions()).toHaveLength(1);
  expect(proxy.listener.stats.notifications).toBeGreaterThan(notifications);
  expect(proxy.listener.stats.waiting).toBe(0);
  const line = proxy.logs.find((l) => l.key === 'wait-1' && l.outcome === 'replayed');
  expect(line?.waitMs).toBeGreaterThan(0);
});

test('many concurrent repeats all get the identical stored response, with one upstream execution', async () => {
  const responses = await Promise.all(
    Array.from({ length: 50 }, () =>
      postJson(`${proxy.url}/jobs`, 'wait-storm', { b: 2 }, { 'x-wait': '300' }),
    ),
  );
  expect(upstream.executions()).toHaveLength(1);
  expect(responses.every((r) => r.status === 201)).toBe(true);
  const bodies = new Set(responses.map((r) => r.text()));
  expect(bodies.size).toBe(1);
  expect(responses.filter((r) => r.headers['idempotent-replayed'] === 'true')).toHaveLength(49);
});

test('answers 409 with Retry-After once waitTimeout passes', async () => {
  const first = postJson(`${proxy.url}/impatient`, 'wait-timeout', {}, { 'x-wait': '1200' });
  await reachedUpstream('wait-timeout');
  const repeat = await postJson(`${proxy.url}/impatient`, 'wait-timeout', {});
  expect(repeat.status).toBe(409);
  expect(Number(repeat.headers['retry-after'])).toBeGreaterThanOrEqual(29);
  expect((await first).status).toBe(201);
  expect(upstream.executions()).toHaveLength(1);
});

test('a waiter whose client hangs up stops waiting and holds nothing', async () => {
  const first = postJson(`${other.url}/jobs`, 'wait-gone', {}, { 'x-wait': '800' });
  await reachedUpstream('wait-gone');
  const req = http.request(`${proxy.url}/jobs`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      'idempotency-key': 'wait-gone',
      'content-length': '2',
    },
  });
  req.on('error', () => undefined);
  req.end('{}');
  await eventually(() => expect(proxy.listener.stats.waiting).toBe(1));
  req.destroy();
  await eventually(() => expect(proxy.listener.stats.waiting).toBe(0));
  expect((await first).status).toBe(201);
  await eventually(() =>
    expect(
      proxy.logs.find((l) => l.key === 'wait-gone' && l.outcome === 'client_gone'),
    ).toBeDefined(),
  );
  expect(upstream.executions()).toHaveLength(1);
});

test('a waiter executes the request itself when the first one is released', async () => {
  const first = postJson(
    `${proxy.url}/jobs`,
    'wait-release',
    {},
    { 'x-wait': '300', 'x-status': '503' },
  );
  await reachedUpstream('wait-release');
  const repeat = await postJson(`${proxy.url}/jobs`, 'wait-release', {});
  expect((await first).status).toBe(503);
  expect(repeat.status).toBe(201);
  expect(repeat.headers['idempotent-replayed']).toBeUndefined();
  expect(upstream.executions()).toHaveLength(2);
});

test('falls back to polling while the listener connection is gone, and reconnects by itself', async () => {
  const pid = proxy.listener.stats.backendPid;
  expect(pid).toBeDefined();
  await proxy.pool.query('SELECT pg_terminate_backend($1::int)', [pid]);
  await until(() => !proxy.listener.stats.connected, 'the listener to see its connection drop', {
    intervalMs: 5,
  });
  const first = postJson(`${other.url}/jobs`, 'wait-poll', {}, { 'x-wait': '300' });
  await reachedUpstream('wait-poll');
  const repeat = await postJson(`${proxy.url}/jobs`, 'wait-poll', {});
  expect(repeat.headers['idempotent-replayed']).toBe('true');
  expect((await first).status).toBe(201);
  await eventually(() => expect(proxy.listener.stats.connected).toBe(true), { intervalMs: 100 });
  expect(proxy.listener.stats.reconnects).toBeGreaterThanOrEqual(1);
  expect(proxy.listener.stats.backendPid).not.toBe(pid);
  const notifications = proxy.listener.stats.notifications;
  const again = postJson(`${other.url}/jobs`, 'wait-after-reconnect', {}, { 'x-wait': '300' });
  await reachedUpstream('wait-after-reconnect');
  await postJson(`${proxy.url}/jobs`, 'wait-after-reconnect', {});
  await again;
  expect(proxy.listener.stats.notifications).toBeGreaterThan(notifications);
});
