// The admin listener: health, readiness, metrics that move with traffic, and /keys behind a bearer
// token (GET shows a record and its history, DELETE clears it so the key executes again).
import { postJson, send } from '../support/http';
import { databaseUrl, startProxy, type TestProxy } from '../support/proxy';
import { sleep, startUpstream, type TestUpstream } from '../support/upstream';

let upstream: TestUpstream;
let proxy: TestProxy;
let tokenless: TestProxy;
const TOKEN = 's3cret-admin-token';

beforeAll(async () => {
  upstream = await startUpstream(async (req, res) => {
    await sleep(Number(req.headers['x-wait'] ?? 0));
    res.writeHead(201, { 'content-type': 'text/plain' });
    res.end(`done ${upstream.executions().length}`);
  });
  const yaml = (token: string) => `
admin:
  token: "${token}"
store:
  table: \${TEST_TABLE}
upstreams: { api: { url: ${upstream.url} } }
routes:
  - { name: orders, match: { path: /orders }, upstream: api, idempotency: {} }
  - { name: tenanted, match: { path: /tenanted }, upstream: api, idempotency: { tenant: [header:authorization] } }
  - { name: secret-keys, match: { path: /secret }, upstream: api, idempotency: { logKey: hash } }
`;
  proxy = await startProxy({ yaml: yaml(TOKEN) });
  tokenless = await startProxy({ yaml: yaml('') });
});

afterAll(async () => {
  await proxy?.close();
  await tokenless?.close();
  await upstream?.close();
});

const admin = (path: string, init: { method?: string; token?: string } = {}) =>
  send(`${proxy.adminUrl}${path}`, {
    method: init.method ?? 'GET',
    headers: init.token === undefined ? {} : { authorization: `Bearer ${init.token}` },
  });

test('healthz and readyz answer 200 while the store is reachable', async () => {
  expect((await admin('/healthz')).json()).toEqual({ status: 'ok' });
  const ready = await admin('/readyz');
  expect(ready.status).toBe(200);
  // Where the table lives: one PostgreSQL here (Citus reports distribution, shards and nodes).
  expect(ready.json()).toEqual({
    status: 'ready',
    store:
      process.env.CITUS_URL === process.env.DATABASE_URL && process.env.CITUS_URL
        ? expect.objectContaining({ kind: 'citus' })
        : { kind: 'postgres' },
    // Shown, not checked (docs/admin-and-console.md): on once the LISTEN connection is proven.
    replayCache: { state: 'on', provenMsAgo: expect.any(Number) },
  });
});

test('metrics count requests by route and outcome, time the store, and never carry a key', async () => {
  const metric = async (pattern: RegExp): Promise<number> => {
    const text = (await admin('/metrics')).text();
    const line = text.split('\n').find((l) => pattern.test(l));
    return line ? Number(line.split(' ').at(-1)) : 0;
  };
  const executed =
    /^idempotency_proxy_requests_total\{route="orders",outcome="executed",status_class="2xx"\}/;
  const replayed = /^idempotency_proxy_replays_total\{route="orders"\}/;
  const claims = /^idempotency_proxy_store_duration_seconds_count\{operation="claim"\}/;
  const before = [await metric(executed), await metric(replayed), await metric(claims)];
  await postJson(`${proxy.url}/orders`, 'metric-key-123', {});
  await postJson(`${proxy.url}/orders`, 'metric-key-123', {});
  await sleep(20);
  expect(await metric(executed)).toBe(before[0]! + 1);
  expect(await metric(replayed)).toBe(before[1]! + 1);
  expect(await metric(claims)).toBe(before[2]! + 2);
  await postJson(`${proxy.url}/orders`, 'metric-key-123', {}); // answered from the replay cache
  expect(
    await metric(/^idempotency_proxy_replay_cache_hits_total\{route="orders"\}/),
  ).toBeGreaterThanOrEqual(1);
  const inFlight = postJson(`${proxy.url}/orders`, 'metric-slow', {}, { 'x-wait': '300' });
  await sleep(100);
  expect(await metric(/^idempotency_proxy_in_flight_claims /)).toBe(1);
  await inFlight;
  expect(await metric(/^idempotency_proxy_in_flight_claims /)).toBe(0);
  const text = (await admin('/metrics')).text();
  expect(text).toContain('# TYPE idempotency_proxy_upstream_duration_seconds histogram');
  expect(text).not.toContain('metric-key-123');
});

test('/keys is off without a token, and refuses a missing or wrong token', async () => {
  const off = await send(`${tokenless.adminUrl}/keys/orders/anything`, { method: 'GET' });
  expect(off.status).toBe(404);
  expect(off.json()).toMatchObject({ title: 'Key inspection is off' });
  expect((await admin('/keys/orders/anything')).status).toBe(401);
  const wrong = await admin('/keys/orders/anything', { token: 'nope' });
  expect(wrong.status).toBe(401);
  expect(wrong.headers['www-authenticate']).toContain('Bearer');
  expect((await admin('/keys/orders/anything', { token: TOKEN })).status).toBe(404);
  expect((await admin('/keys/no-such-route/anything', { token: TOKEN })).json()).toMatchObject({
    title: 'Unknown route',
  });
});

test('GET /keys shows a record with its history; DELETE clears it so the key executes again', async () => {
  const first = await postJson(`${proxy.url}/orders`, 'admin-key/1', { amount: 1 });
  await postJson(`${proxy.url}/orders`, 'admin-key/1', { amount: 1 });
  await proxy.flushCounters();
  const path = `/keys/orders/${encodeURIComponent('admin-key/1')}`;
  const record = (await admin(path, { token: TOKEN })).json<Record<string, unknown>>();
  expect(record).toMatchObject({
    scope: 'orders',
    key: 'admin-key/1',
    state: 'completed',
    status: 201,
    attempts: 2,
    replays: 1,
    fence: '1',
  });
  expect(record.history).toEqual([
    expect.objectContaining({ event: 'claimed', fence: 1 }),
    expect.objectContaining({ event: 'completed', fence: 1, status: 201 }),
  ]);
  expect(record.body).toBeUndefined();
  const withBody = (await admin(`${path}?body=1`, { token: TOKEN })).json<{
    body: { encoding: string; data: string };
  }>();
  expect(withBody.body).toEqual({ encoding: 'utf8', data: first.text() });

  const deleted = await admin(path, { method: 'DELETE', token: TOKEN });
  expect(deleted.json()).toEqual({ deleted: true, scope: 'orders', key: 'admin-key/1' });
  expect((await admin(path, { token: TOKEN })).status).toBe(404);
  const again = await postJson(`${proxy.url}/orders`, 'admin-key/1', { amount: 1 });
  expect(again.headers['idempotent-replayed']).toBeUndefined();
  expect(again.text()).not.toBe(first.text());
});

test('tenanted keys are found with ?tenant= and the raw tenant value', async () => {
  await postJson(`${proxy.url}/tenanted`, 'tenant-key', {}, { authorization: 'Bearer alice' });
  const found = await admin(
    `/keys/tenanted/tenant-key?tenant=${encodeURIComponent('Bearer alice')}`,
    { token: TOKEN },
  );
  expect(found.status).toBe(200);
  expect(found.json()).toMatchObject({
    key: 'tenant-key',
    tenant: expect.stringMatching(/^[0-9a-f]{64}$/),
  });
  expect(
    (await admin('/keys/tenanted/tenant-key?tenant=Bearer%20bob', { token: TOKEN })).status,
  ).toBe(404);
  expect((await admin('/keys/tenanted/tenant-key', { token: TOKEN })).status).toBe(404);
});

test('request logs show a hash of the key on routes with logKey: hash', async () => {
  await postJson(`${proxy.url}/secret`, 'sensitive-key-42', {});
  await sleep(20);
  const line = proxy.logs.find((l) => l.route === 'secret-keys' && l.msg === 'request');
  expect(line?.key).toMatch(/^sha256:[0-9a-f]{16}$/);
  expect(JSON.stringify(proxy.logs)).not.toContain('sensitive-key-42');
});

test('readyz answers 503 while PostgreSQL is read-only (a standby, or a primary after failover)', async () => {
  const name = `ro_${Date.now().toString(36)}`;
  await proxy.pool.query(`CREATE DATABASE ${name}`);
  const url = new URL(databaseUrl());
  url.pathname = `/${name}`;
  const readOnly = await startProxy({
    yaml: 'upstreams: { api: { url: http://127.0.0.1:1 } }\nroutes: [{ name: r, match: { path: /r }, upstream: api, idempotency: {} }]\nstore: { table: "${TEST_TABLE}" }\n',
    databaseUrl: url.toString(),
  });
  try {
    expect((await send(`${readOnly.adminUrl}/readyz`, { method: 'GET' })).status).toBe(200);
    await proxy.pool.query(`ALTER DATABASE ${name} SET default_transaction_read_only = on`);
    // Sessions opened from now on are read-only, as on a standby: drop the pool's current ones.
    await proxy.pool.query(
      'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()',
      [name],
    );
    let ready = await send(`${readOnly.adminUrl}/readyz`, { method: 'GET' });
    // The first call may land on a connection that was just terminated.
    if (ready.status === 503 && !ready.text().includes('read-only'))
      ready = await send(`${readOnly.adminUrl}/readyz`, { method: 'GET' });
    expect(ready.status).toBe(503);
    expect(ready.json()).toMatchObject({
      checks: { store: expect.stringContaining('PostgreSQL is read-only') },
    });
  } finally {
    await readOnly.close();
    await proxy.pool.query(`DROP DATABASE ${name} WITH (FORCE)`);
  }
});
