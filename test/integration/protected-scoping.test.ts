// Scope = route name (or idempotency.group) + tenant hash; the key header sent upstream; expiry.
import { postJson } from '../support/http';
import { startProxy, type TestProxy } from '../support/proxy';
import { sleep, startUpstream, type TestUpstream } from '../support/upstream';

let upstream: TestUpstream;
let proxy: TestProxy;

beforeAll(async () => {
  upstream = await startUpstream((req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.end(`execution ${upstream.executions().length} for ${req.url}`);
  });
  proxy = await startProxy({
    yaml: `
store:
  table: \${TEST_TABLE}
upstreams: { api: { url: ${upstream.url} } }
routes:
  - name: tenanted
    match: { path: /tenanted }
    upstream: api
    idempotency: { tenant: [header:authorization, header:x-org] }
  - name: cards-a
    match: { path: /cards/a }
    upstream: api
    idempotency: { group: cards, fingerprint: { parts: [method, body] } }
  - name: cards-b
    match: { path: /cards/b }
    upstream: api
    idempotency: { group: cards, fingerprint: { parts: [method, body] } }
  - name: unscoped-a
    match: { path: /unscoped/a }
    upstream: api
    idempotency: { fingerprint: { parts: [method, body] } }
  - name: unscoped-b
    match: { path: /unscoped/b }
    upstream: api
    idempotency: { fingerprint: { parts: [method, body] } }
  - name: no-forward
    match: { path: /no-forward }
    upstream: api
    idempotency: { forwardKeyAs: false }
  - name: renamed
    match: { path: /renamed }
    upstream: api
    idempotency: { key: { header: X-Request-Key }, forwardKeyAs: X-Dedupe-Id }
  - name: short-lived
    match: { path: /short-lived }
    upstream: api
    idempotency: { ttl: 1s }
`,
  });
});

afterAll(async () => {
  await proxy?.close();
  await upstream?.close();
});

beforeEach(() => {
  upstream.received.length = 0;
});

test('scopes keys per tenant: the same key from two tenants executes twice, and raw tenant values are never stored', async () => {
  const alice = { authorization: 'Bearer alice-secret-token', 'x-org': 'acme' };
  const bob = { authorization: 'Bearer bob-secret-token', 'x-org': 'acme' };
  await postJson(`${proxy.url}/tenanted`, 'shared-key', { a: 1 }, alice);
  await postJson(`${proxy.url}/tenanted`, 'shared-key', { a: 1 }, bob);
  const aliceAgain = await postJson(`${proxy.url}/tenanted`, 'shared-key', { a: 1 }, alice);
  expect(aliceAgain.headers['idempotent-replayed']).toBe('true');
  expect(aliceAgain.text()).toBe('execution 1 for /tenanted');
  const otherOrg = await postJson(
    `${proxy.url}/tenanted`,
    'shared-key',
    { a: 1 },
    { ...alice, 'x-org': 'other' },
  );
  expect(otherOrg.headers['idempotent-replayed']).toBeUndefined();
  expect(upstream.executions()).toHaveLength(3);

  const { rows } = await proxy.pool.query(`SELECT * FROM ${proxy.table} WHERE scope = 'tenanted'`);
  expect(rows).toHaveLength(3);
  const dump = JSON.stringify(rows);
  expect(dump).not.toContain('secret-token');
  expect(dump).not.toContain('acme');
  for (const row of rows) expect(row.tenant).toMatch(/^[0-9a-f]{64}$/);
});

test('shares keys across routes of one group, and keeps them apart otherwise', async () => {
  await postJson(`${proxy.url}/cards/a`, 'grouped-1', { card: 1 });
  const viaB = await postJson(`${proxy.url}/cards/b`, 'grouped-1', { card: 1 });
  expect(viaB.headers['idempotent-replayed']).toBe('true');
  expect(viaB.text()).toBe('execution 1 for /cards/a');
  await postJson(`${proxy.url}/unscoped/a`, 'separate-1', { card: 1 });
  const otherRoute = await postJson(`${proxy.url}/unscoped/b`, 'separate-1', { card: 1 });
  expect(otherRoute.headers['idempotent-replayed']).toBeUndefined();
  expect(upstream.executions()).toHaveLength(3);
});

test('strips the key when forwardKeyAs is false, and renames it when set', async () => {
  await postJson(`${proxy.url}/no-forward`, 'hidden-1', {});
  expect(upstream.executions()[0]!.headers['idempotency-key']).toBeUndefined();
  await postJson(`${proxy.url}/renamed`, undefined, {}, { 'x-request-key': '"renamed-1"' });
  const seen = upstream.executions()[1]!;
  expect(seen.headers['x-dedupe-id']).toBe('renamed-1');
  expect(seen.headers['x-request-key']).toBeUndefined();
  expect(seen.rawHeaders).toContain('X-Dedupe-Id');
  const missing = await postJson(`${proxy.url}/renamed`, 'wrong-header', {});
  expect(missing.status).toBe(400);
  expect(missing.json()).toMatchObject({ code: 'IDEMPOTENCY_KEY_MISSING' });
});

test('treats an expired record as absent: the same key executes again after ttl', async () => {
  await postJson(`${proxy.url}/short-lived`, 'expiring-1', { a: 1 });
  const replay = await postJson(`${proxy.url}/short-lived`, 'expiring-1', { a: 1 });
  expect(replay.headers['idempotent-replayed']).toBe('true');
  await sleep(1_200);
  const again = await postJson(`${proxy.url}/short-lived`, 'expiring-1', { a: 2 });
  expect(again.status).toBe(200);
  expect(again.headers['idempotent-replayed']).toBeUndefined();
  expect(upstream.executions()).toHaveLength(2);
  const { rows } = await proxy.pool.query(
    `SELECT attempts, replays, fence FROM ${proxy.table} WHERE key = 'expiring-1'`,
  );
  expect(rows).toEqual([{ attempts: 1, replays: 0, fence: '2' }]);
});
