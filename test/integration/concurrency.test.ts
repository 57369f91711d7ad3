// The promise: one key, one upstream execution, however many copies arrive at once.
import { postJson } from '../support/http';
import { startProxy, type TestProxy } from '../support/proxy';
import { sleep, startUpstream, type TestUpstream } from '../support/upstream';

let upstream: TestUpstream;
let proxy: TestProxy;

beforeAll(async () => {
  upstream = await startUpstream(async (req, res) => {
    await sleep(Number(req.headers['x-wait'] ?? 0));
    res.writeHead(201, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ execution: upstream.executions().length, at: Date.now() }));
  });
  proxy = await startProxy({
    yaml: `
store: { table: "\${TEST_TABLE}", poolSize: 10 }
upstreams: { api: { url: ${upstream.url} } }
routes:
  - { name: charges, match: { path: /charges }, upstream: api, idempotency: {} }
`,
  });
});

afterAll(async () => {
  await proxy?.close();
  await upstream?.close();
});

test('100 concurrent requests with one key execute once; the rest get 409 or the replay', async () => {
  const responses = await Promise.all(
    Array.from({ length: 100 }, () =>
      postJson(`${proxy.url}/charges`, 'storm-1', { amount: 5 }, { 'x-wait': '300' }),
    ),
  );
  expect(upstream.executions()).toHaveLength(1);
  const statuses = responses.map((r) => r.status);
  expect(statuses.filter((s) => s === 201).length + statuses.filter((s) => s === 409).length).toBe(
    100,
  );
  const executed = responses.filter(
    (r) => r.status === 201 && r.headers['idempotent-replayed'] === undefined,
  );
  expect(executed).toHaveLength(1);
  for (const conflict of responses.filter((r) => r.status === 409)) {
    expect(Number(conflict.headers['retry-after'])).toBeGreaterThanOrEqual(1);
  }
  const original = executed[0]!.body;
  for (const replay of responses.filter((r) => r.status === 201 && r !== executed[0])) {
    expect(replay.body.equals(original)).toBe(true);
  }
  // After completion every repeat replays byte-identical bodies.
  const repeats = await Promise.all(
    Array.from({ length: 50 }, () => postJson(`${proxy.url}/charges`, 'storm-1', { amount: 5 })),
  );
  for (const repeat of repeats) {
    expect(repeat.status).toBe(201);
    expect(repeat.headers['idempotent-replayed']).toBe('true');
    expect(repeat.body.equals(original)).toBe(true);
  }
  expect(upstream.executions()).toHaveLength(1);
  await proxy.flushCounters(); // replay-cache hits are added to the row in batches
  const { rows } = await proxy.pool.query(
    `SELECT attempts, replays FROM ${proxy.table} WHERE key = 'storm-1'`,
  );
  expect(rows[0]).toEqual({ attempts: 150, replays: 50 + executedReplays(responses) });
});

test('concurrent requests with distinct keys each execute exactly once', async () => {
  const before = upstream.executions().length;
  const keys = Array.from({ length: 60 }, (_, i) => `distinct-${i}`);
  const responses = await Promise.all(
    [...keys, ...keys].map((key) =>
      postJson(`${proxy.url}/charges`, key, { key }, { 'x-wait': '50' }),
    ),
  );
  expect(responses.every((r) => r.status === 201 || r.status === 409)).toBe(true);
  const executed = upstream.executions().slice(before);
  expect(executed).toHaveLength(60);
  expect(new Set(executed.map((r) => r.headers['idempotency-key'])).size).toBe(60);
});

function executedReplays(
  responses: { status: number; headers: Record<string, unknown> }[],
): number {
  return responses.filter((r) => r.headers['idempotent-replayed'] === 'true').length;
}
