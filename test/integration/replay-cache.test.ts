// The replay cache answers repeats of completed keys from memory, and stays correct: operator clears
// reach every instance (the clearing one before it answers), nothing is served while clears cannot
// be heard, expiry is respected, routes that fingerprint differently share nothing, a reload that
// changes a route's fingerprint policy leaves nothing behind, and the audit counters still add up.
import fs from 'node:fs';
import * as fingerprints from '../../src/idempotency/fingerprint';
import { eventually, until } from '../support/eventually';
import { postJson, send } from '../support/http';
import { databaseUrl, startProxy, type TestProxy, uniqueTable } from '../support/proxy';
import { startProxyProcess } from '../support/proxy-process';
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
  # One group, two fingerprint policies: the lenient route leaves sent_at out, the strict one not.
  - name: lenient
    match: { path: /lenient }
    upstream: api
    idempotency: { group: shared, fingerprint: { parts: [method, body], ignore: [body.sent_at] } }
  - name: strict
    match: { path: /strict }
    upstream: api
    idempotency: { group: shared, fingerprint: { parts: [method, body] } }
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

/**
 * How long after a clear commits another instance may still answer the cleared record from memory:
 * its listener's probe period plus deadline (docs/store-topologies.md), defaults 5 s + 2 s.
 */
const CLEAR_BOUND_MS = 7_000;

const clear = (proxy: TestProxy, route: string, key: string) =>
  send(`${proxy.adminUrl}/keys/${route}/${key}`, {
    method: 'DELETE',
    headers: { authorization: `Bearer ${TOKEN}` },
  });

const lastLine = (proxy: TestProxy, key: string) =>
  proxy.logs.filter((l) => l.msg === 'request' && l.key === key).at(-1);

/**
 * Repeats a request until the instance answers it from memory. The first repeat normally admits the
 * record, but a clear's NOTIFY (an earlier test's, the instance's own included) that arrives while
 * that repeat asks the store makes the cache refuse what the repeat read: the next one admits it.
 */
const repeatUntilCached = (proxy: TestProxy, key: string, repeat: () => Promise<unknown>) =>
  eventually(async () => {
    await repeat();
    expect(lastLine(proxy, key)).toMatchObject({ outcome: 'replayed', cached: true });
  });

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

test('a clear is answered only once this instance has forgotten the record: the next request executes', async () => {
  for (let round = 0; round < 20; round++) {
    const key = `clear-here-${round}`;
    await postJson(`${a.url}/orders`, key, {});
    await repeatUntilCached(a, key, () => postJson(`${a.url}/orders`, key, {}));
    expect((await clear(a, 'orders', key)).status).toBe(200);
    const next = await postJson(`${a.url}/orders`, key, {});
    expect(next.headers['idempotent-replayed']).toBeUndefined();
    expect(lastLine(a, key)).toMatchObject({ outcome: 'executed' });
  }
});

test('another instance forgets a cleared record within the documented bound', async () => {
  await postJson(`${b.url}/orders`, 'clear-there', {});
  await repeatUntilCached(b, 'clear-there', () => postJson(`${b.url}/orders`, 'clear-there', {}));
  expect((await clear(a, 'orders', 'clear-there')).status).toBe(200);
  await sleep(CLEAR_BOUND_MS);
  const next = await postJson(`${b.url}/orders`, 'clear-there', {});
  expect(next.headers['idempotent-replayed']).toBeUndefined();
  expect(lastLine(b, 'clear-there')).toMatchObject({ outcome: 'executed' });
}, 20_000);

test('routes of one group that fingerprint differently never answer each other from memory', async () => {
  const sent = (path: string, sentAt: number) =>
    postJson(`${a.url}${path}`, 'grouped-1', { amount: 10, sent_at: sentAt });
  expect((await sent('/lenient', 1)).status).toBe(201);
  // The same request to the lenient route: replayed, and answered from memory.
  await repeatUntilCached(a, 'grouped-1', async () => {
    expect((await sent('/lenient', 2)).headers['idempotent-replayed']).toBe('true');
  });
  // The strict route reads sent_at: the database holds another fingerprint for this key.
  for (let i = 0; i < 2; i++) {
    const strict = await sent('/strict', 2);
    expect(strict.status).toBe(422);
    expect(lastLine(a, 'grouped-1')?.cached).toBeUndefined();
  }
});

test('a SIGHUP that removes an ignore entry leaves no cached answer the database would refuse', async () => {
  const table = uniqueTable('reload');
  const config = (ignore: string) => `
listen:
  host: 127.0.0.1
  port: \${PROXY_PORT}
admin:
  port: \${ADMIN_PORT}
store: { table: ${table} }
upstreams: { api: { url: ${upstream.url} } }
routes:
  - { name: orders, match: { path: /orders }, upstream: api, idempotency: { fingerprint: { ignore: [${ignore}] } } }
`;
  const yaml = config('body.sent_at');
  const proxy = await startProxyProcess({ yaml, env: { DATABASE_URL: databaseUrl() } });
  try {
    const sent = (sentAt: number) =>
      postJson(`${proxy.url}/orders`, 'reloaded-1', { amount: 10, sent_at: sentAt });
    expect((await sent(1)).status).toBe(201);
    await sent(2); // replayed from the database, and admitted with its bytes
    await eventually(async () => {
      expect((await sent(2)).status).toBe(201);
      expect(proxy.output()).toMatch(/"key":"reloaded-1".*"cached":true/);
    });
    fs.writeFileSync(proxy.configFile, config(''));
    proxy.child.kill('SIGHUP');
    await eventually(() => expect(proxy.output()).toContain('configuration reloaded'));
    // sent_at now counts: the stored fingerprint (without it) no longer matches this request.
    const after = await sent(2);
    expect(after.status).toBe(422);
    const original = await sent(1);
    expect(original.status).toBe(422);
  } finally {
    await proxy.kill();
  }
}, 60_000);
