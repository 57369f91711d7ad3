// The replay cache answers repeats of completed keys from memory, and stays correct: operator clears
// reach every instance, nothing is served while clears cannot be heard, expiry is respected, and the
// audit counters still add up.
import * as fingerprints from '../../src/idempotency/fingerprint';
import { eventually, until } from '../support/eventually';
import { postJson, send } from '../support/http';
import { startProxy, type TestProxy, uniqueTable } from '../support/proxy';
import { sleep, startUpstream, type TestUpstream } from '../support/upstream';

let upstream: TestUpstream;
let a: TestProxy;
let b: TestProxy;
const TOKEN = 'cache-test-token';

beforeAll(async () => {
  upstream = await startUpstream((_req, res) => {
    res.writeHead(201, { 'content-type': 'text/plain' });
    res.end(`execution ${upstream.executions().length}`);
  });
  const table = uniqueTable('cache');
  const yaml = `
admin:
  token: ${TOKEN}
store:
  table: ${table}
upstreams: { api: { url: ${upstream.url} } }
routes:
  - { name: orders, match: { path: /orders }, upstream: api, idempotency: {} }
  - { name: brief, match: { path: /brief }, upstream: api, idempotency: { ttl: 1500ms } }
`;
  // Two instances on one table, as behind a load balancer.
  a = await startProxy({ yaml, table });
  b = await startProxy({ yaml, table });
});

afterAll(async () => {
  await a?.close();
  await b?.close();
  await upstream?.close();
});

const lastLine = (proxy: TestProxy, key: string) =>
  proxy.logs.filter((l) => l.msg === 'request' && l.key === key).at(-1);

test('repeats of a completed key are answered from memory after the first, and their counters still reach the record', async () => {
  const first = await postJson(`${a.url}/orders`, 'cached-1', { n: 1 });
  // The first repeat asks the store and admits the record; the next ones are answered from memory.
  const admitted = await postJson(`${a.url}/orders`, 'cached-1', { n: 1 });
  expect(admitted.headers['idempotent-replayed']).toBe('true');
  expect(lastLine(a, 'cached-1')).toMatchObject({ outcome: 'replayed', attempts: 2 });
  expect(lastLine(a, 'cached-1')?.cached).toBeUndefined();
  for (let i = 0; i < 4; i++) {
    const replay = await postJson(`${a.url}/orders`, 'cached-1', { n: 1 });
    expect(replay.body.equals(first.body)).toBe(true);
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(lastLine(a, 'cached-1')).toMatchObject({
      outcome: 'replayed',
      cached: true,
      storeMs: 0,
    });
  }
  const mismatch = await postJson(`${a.url}/orders`, 'cached-1', { n: 2 });
  expect(mismatch.status).toBe(422);
  expect(lastLine(a, 'cached-1')).toMatchObject({ outcome: 'mismatch', cached: true });
  await a.flushCounters();
  const { rows } = await a.pool.query(
    `SELECT attempts, replays FROM ${a.table} WHERE key = 'cached-1'`,
  );
  expect(rows).toEqual([{ attempts: 7, replays: 5 }]);
  expect(upstream.executions()).toHaveLength(1);
});

test('a repeat resent byte for byte is recognised by its bytes, another spelling of the same JSON by its canonical form', async () => {
  const json = (body: string) =>
    send(`${a.url}/orders`, {
      body,
      headers: { 'content-type': 'application/json', 'idempotency-key': 'spelled-1' },
    });
  const first = await json('{"amount":10,"currency":"EUR"}');
  expect(first.status).toBe(201);
  expect((await json('{"amount":10,"currency":"EUR"}')).headers['idempotent-replayed']).toBe(
    'true',
  );
  const canonical = jest.spyOn(fingerprints, 'computeFingerprint');
  try {
    for (let i = 0; i < 3; i++) {
      const replay = await json('{"amount":10,"currency":"EUR"}');
      expect(replay.body.equals(first.body)).toBe(true);
      expect(lastLine(a, 'spelled-1')).toMatchObject({ outcome: 'replayed', cached: true });
    }
    expect(canonical).not.toHaveBeenCalled();
    // Other bytes, the same request: matched by the canonical fingerprint once, then by its bytes.
    const respelled = await json('{ "currency": "EUR", "amount": 10 }');
    expect(respelled.status).toBe(201);
    expect(respelled.body.equals(first.body)).toBe(true);
    expect(canonical).toHaveBeenCalledTimes(1);
    await json('{ "currency": "EUR", "amount": 10 }');
    expect(canonical).toHaveBeenCalledTimes(1);
    // A body the fingerprint cannot read is refused, never replayed nor forwarded.
    const duplicate = await json('{"amount":10,"amount":1000,"currency":"EUR"}');
    expect(duplicate.status).toBe(400);
    expect(duplicate.json<{ code: string }>().code).toBe('JSON_DUPLICATE_KEY');
    const other = await json('{"amount":11,"currency":"EUR"}');
    expect(other.status).toBe(422);
  } finally {
    canonical.mockRestore();
  }
  expect(
    upstream.executions().filter((e) => e.headers['idempotency-key'] === 'spelled-1'),
  ).toHaveLength(1);
});

test('an operator clear on one instance evicts the record from every instance', async () => {
  await postJson(`${a.url}/orders`, 'cleared-1', {});
  await postJson(`${b.url}/orders`, 'cleared-1', {}); // b learns it from the store …
  await postJson(`${b.url}/orders`, 'cleared-1', {});
  expect(lastLine(b, 'cleared-1')).toMatchObject({ cached: true }); // … and then answers from memory
  const cachedOnB = b.cache!.size;
  const cleared = await send(`${a.adminUrl}/keys/orders/cleared-1`, {
    method: 'DELETE',
    headers: { authorization: `Bearer ${TOKEN}` },
  });
  expect(cleared.status).toBe(200);
  // The NOTIFY is delivered when the DELETE commits; b evicts the record when it hears it.
  await eventually(() => expect(b.cache!.size).toBe(cachedOnB - 1));
  const executions = upstream.executions().length;
  const again = await postJson(`${b.url}/orders`, 'cleared-1', {});
  expect(again.headers['idempotent-replayed']).toBeUndefined();
  expect(upstream.executions()).toHaveLength(executions + 1);
});

test('nothing is served from memory while clears cannot be heard, and the cache starts empty again', async () => {
  await postJson(`${a.url}/orders`, 'listener-1', {});
  await postJson(`${a.url}/orders`, 'listener-1', {});
  expect(a.cache!.size).toBeGreaterThan(0);
  await a.pool.query('SELECT pg_terminate_backend($1::int)', [a.listener.stats.backendPid]);
  await until(() => !a.listener.stats.connected, 'the listener to see its connection drop', {
    intervalMs: 5,
  });
  const during = await postJson(`${a.url}/orders`, 'listener-1', {});
  expect(during.headers['idempotent-replayed']).toBe('true');
  expect(lastLine(a, 'listener-1')?.cached).toBeUndefined(); // the cache was emptied when the connection dropped
  await eventually(() => expect(a.listener.stats.connected).toBe(true), { intervalMs: 100 });
  expect(a.cache!.size).toBe(0);
});

test('a cached record is not served past its expiry', async () => {
  await postJson(`${a.url}/brief`, 'brief-1', {});
  await postJson(`${a.url}/brief`, 'brief-1', {});
  await sleep(1_600); // past the route's 1500ms ttl
  const after = await postJson(`${a.url}/brief`, 'brief-1', {});
  expect(after.headers['idempotent-replayed']).toBeUndefined();
  expect(lastLine(a, 'brief-1')).toMatchObject({ outcome: 'executed' });
});
