// The console's JSON API on the admin listener (/api, behind the admin bearer token): listings by
// state and route in cursor-paginated pages, one record with its history, clearing an unknown
// outcome so the next request executes, the live counters, and the errors for bad input.
import { postJson, send } from '../support/http';
import { eventually } from '../support/eventually';
import { startProxy, type TestProxy } from '../support/proxy';
import { sleep, startWaitingUpstream, type TestUpstream } from '../support/upstream';

const TOKEN = 'console-token-8d1f';
let upstream: TestUpstream;
let proxy: TestProxy;
let tokenless: TestProxy;

beforeAll(async () => {
  upstream = await startWaitingUpstream();
  const yaml = (token: string) => `
admin: { token: "${token}" }
store: { table: "\${TEST_TABLE}" }
upstreams:
  api: { url: ${upstream.url}, timeout: 1s }
  slow: { url: ${upstream.url}, timeout: 10s }
defaults: { lockTimeout: 20s }
routes:
  - { name: orders, match: { path: /orders }, upstream: api, idempotency: {} }
  - { name: tenanted, match: { path: /tenanted }, upstream: api, idempotency: { tenant: [header:authorization] } }
  - { name: slow, match: { path: /slow }, upstream: slow, idempotency: {} }
`;
  proxy = await startProxy({ yaml: yaml(TOKEN) });
  tokenless = await startProxy({ yaml: yaml('') });
});

afterAll(async () => {
  await proxy?.close();
  await tokenless?.close();
  await upstream?.close();
});

const api = (path: string, init: { method?: string; token?: string | null } = {}) =>
  send(`${proxy.adminUrl}${path}`, {
    method: init.method ?? 'GET',
    headers: init.token === null ? {} : { authorization: `Bearer ${init.token ?? TOKEN}` },
  });

interface Summary {
  scope: string;
  tenant: string;
  key: string;
  route: string;
  state: string;
  attempts: number;
  lastSeenAt: string;
  leaseLeftMs: number | null;
  problem: Record<string, unknown> | null;
}
interface Page {
  records: Summary[];
  nextCursor: string | null;
}

test('answers 401 without the token or with a wrong one, and never echoes what was sent', async () => {
  const none = await api('/api/records', { token: null });
  expect(none.status).toBe(401);
  expect(none.headers['www-authenticate']).toMatch(/^Bearer/);
  expect(none.headers['content-type']).toBe('application/problem+json');
  const wrong = await api('/api/counters', { token: 'guess-123' });
  expect(wrong.status).toBe(401);
  expect(wrong.text()).not.toContain('guess-123');
  expect(wrong.text()).not.toContain(TOKEN);
  // No token configured: the API and the page are off, not open.
  for (const path of ['/api/records', '/ui']) {
    const off = await send(`${tokenless.adminUrl}${path}`, { method: 'GET' });
    expect(off.status).toBe(404);
  }
});

test('lists completed records newest first in pages that the cursor walks without gaps or repeats', async () => {
  const keys = ['page-a', 'page-b', 'page-c', 'page-d', 'page-e'];
  for (const key of keys) {
    expect((await postJson(`${proxy.url}/orders`, key, { key })).status).toBe(201);
  }
  await postJson(`${proxy.url}/tenanted`, 'page-t', {}, { authorization: 'Bearer alice' });
  const seen: Summary[] = [];
  let cursor: string | null = null;
  let pages = 0;
  do {
    const query: string = `state=completed&route=orders&limit=2${cursor ? `&cursor=${cursor}` : ''}`;
    const res = await api(`/api/records?${query}`);
    expect(res.status).toBe(200);
    const page = res.json<Page>();
    expect(page.records.length).toBeLessThanOrEqual(2);
    seen.push(...page.records);
    cursor = page.nextCursor;
    pages++;
  } while (cursor !== null && pages < 10);
  expect(pages).toBe(3);
  // Newest first: the reverse of the order they were made in; only the filtered route and state.
  expect(seen.map((r) => r.key)).toEqual([...keys].reverse());
  expect(seen.every((r) => r.route === 'orders' && r.state === 'completed')).toBe(true);
  const times = seen.map((r) => Date.parse(r.lastSeenAt));
  expect(times).toEqual([...times].sort((a, b) => b - a));
  // Without a route filter the tenanted record is there too, with its tenant as a hash.
  const all = (await api('/api/records?state=completed')).json<Page>();
  const tenanted = all.records.find((r) => r.key === 'page-t');
  expect(tenanted?.tenant).toMatch(/^[0-9a-f]{64}$/);
  expect(JSON.stringify(all)).not.toContain('alice');
});

test('lists an unknown outcome with its stored problem, shows its history, and a clear lets the next request execute', async () => {
  const first = await postJson(`${proxy.url}/orders`, 'unknown-1', {}, { 'x-wait': '2500' });
  expect(first.status).toBe(504);
  expect(first.headers['idempotency-outcome']).toBe('unknown');
  await postJson(`${proxy.url}/orders`, 'unknown-1', {}); // a repeat: replayed, counted
  const unknown = (await api('/api/records?state=unknown')).json<Page>();
  const listed = unknown.records.find((r) => r.key === 'unknown-1');
  expect(listed).toMatchObject({
    scope: 'orders',
    route: 'orders',
    state: 'completed',
    attempts: 2,
    problem: { code: 'UPSTREAM_TIMEOUT', status: 504, key: 'unknown-1' },
  });
  expect(unknown.records.every((r) => r.problem !== null)).toBe(true);
  const completed = (await api('/api/records?state=completed&route=orders&limit=500')).json<Page>();
  expect(completed.records.map((r) => r.key)).not.toContain('unknown-1');

  const one = await api('/api/records/orders/unknown-1?body=1');
  expect(one.status).toBe(200);
  const record = one.json<{ outcomeUnknown: boolean; history: { event: string }[] }>();
  expect(record.outcomeUnknown).toBe(true);
  expect(record.history.map((e) => e.event)).toEqual(['claimed', 'completed']);

  await sleep(2_500); // the slow upstream finishes its one execution
  const executionsBefore = upstream.executions().length;
  const cleared = await api('/api/records/orders/unknown-1', { method: 'DELETE' });
  expect(cleared.status).toBe(200);
  expect(cleared.json()).toEqual({ deleted: true, scope: 'orders', tenant: '', key: 'unknown-1' });
  expect(proxy.logs).toContainEqual(
    expect.objectContaining({ admin: 'clear', scope: 'orders', key: 'unknown-1' }),
  );
  expect(JSON.stringify(proxy.logs)).not.toContain(TOKEN);
  const again = await postJson(`${proxy.url}/orders`, 'unknown-1', {});
  expect(again.status).toBe(201);
  expect(again.headers['idempotent-replayed']).toBeUndefined();
  expect(upstream.executions()).toHaveLength(executionsBefore + 1);
  const after = (await api('/api/records?state=unknown')).json<Page>();
  expect(after.records.map((r) => r.key)).not.toContain('unknown-1');
  expect((await api('/api/records/orders/unknown-1', { method: 'DELETE' })).status).toBe(200);
  expect((await api('/api/records/orders/unknown-1', { method: 'DELETE' })).status).toBe(404);
});

test('lists an in-flight claim with the lease it has left', async () => {
  const running = postJson(`${proxy.url}/slow`, 'flight-1', {}, { 'x-wait': '1500' });
  const listed = await eventually(async () => {
    const page = (await api('/api/records?state=in_flight')).json<Page>();
    const found = page.records.find((r) => r.key === 'flight-1');
    expect(found).toBeDefined();
    return found!;
  });
  expect(listed.state).toBe('in_progress');
  expect(listed.leaseLeftMs).toBeGreaterThan(10_000);
  expect(listed.leaseLeftMs).toBeLessThanOrEqual(20_000);
  expect((await running).status).toBe(201);
  const page = (await api('/api/records?state=in_flight')).json<Page>();
  expect(page.records.map((r) => r.key)).not.toContain('flight-1');
});

test('addresses a tenanted record by raw tenant value or by the hash a listing shows', async () => {
  await postJson(`${proxy.url}/tenanted`, 'tenant-k', {}, { authorization: 'Bearer bob' });
  const byValue = await api(
    `/api/records/tenanted/tenant-k?tenant=${encodeURIComponent('Bearer bob')}`,
  );
  expect(byValue.status).toBe(200);
  const hash = byValue.json<{ tenant: string }>().tenant;
  expect((await api('/api/records/tenanted/tenant-k')).status).toBe(404);
  expect((await api(`/api/records/tenanted/tenant-k?tenantHash=${hash}`)).status).toBe(200);
  const bad = await api('/api/records/tenanted/tenant-k?tenantHash=zz');
  expect(bad.status).toBe(400);
  const cleared = await api(`/api/records/tenanted/tenant-k?tenantHash=${hash}`, {
    method: 'DELETE',
  });
  expect(cleared.json()).toMatchObject({ deleted: true, tenant: hash });
});

test('rejects a bad cursor, limit, state or parameter with a problem that says what to do', async () => {
  const cases: [string, RegExp][] = [
    ['/api/records?cursor=not-a-cursor', /nextCursor of the previous page/],
    [`/api/records?cursor=${Buffer.from('["v1",1]').toString('base64url')}`, /cursor/],
    ['/api/records?limit=0', /1 to 500/],
    ['/api/records?limit=501', /1 to 500/],
    ['/api/records?limit=ten', /1 to 500/],
    ['/api/records?state=lost', /unknown, in_flight, completed, reconciled, all/],
    ['/api/records?sate=unknown', /"sate" is none of them/],
  ];
  for (const [path, detail] of cases) {
    const res = await api(path);
    expect([path, res.status]).toEqual([path, 400]);
    expect(res.headers['content-type']).toBe('application/problem+json');
    expect(res.json<{ detail: string }>().detail).toMatch(detail);
  }
  expect((await api('/api/nothing')).status).toBe(404);
});

test('counts answers per outcome in 10-second buckets over the last 15 minutes', async () => {
  await postJson(`${proxy.url}/orders`, 'count-1', {});
  await postJson(`${proxy.url}/orders`, 'count-1', {});
  const counters = (await api('/api/counters')).json<{
    bucketSeconds: number;
    buckets: { start: string; counts: Record<string, number> }[];
    totals: Record<string, number>;
  }>();
  expect(counters.bucketSeconds).toBe(10);
  expect(counters.buckets).toHaveLength(90);
  expect(counters.totals.executed).toBeGreaterThanOrEqual(1);
  expect(counters.totals.replayed).toBeGreaterThanOrEqual(1);
  expect(Object.values(counters.buckets.at(-1)!.counts).length).toBeGreaterThan(0);
  const scopes = (await api('/api/scopes')).json<{ scopes: { scope: string }[] }>();
  expect(scopes.scopes.map((s) => s.scope)).toEqual(['orders', 'tenanted', 'slow']);
});

test('serves the console page with a CSP that allows only its own inline script and style', async () => {
  const page = await send(`${proxy.adminUrl}/ui`, { method: 'GET' });
  expect(page.status).toBe(200);
  expect(page.headers['content-type']).toBe('text/html; charset=utf-8');
  const csp = String(page.headers['content-security-policy']);
  expect(csp).toMatch(/default-src 'self'/);
  expect(csp).toMatch(/script-src 'sha256-[A-Za-z0-9+/=]+'/);
  expect(csp).not.toContain('unsafe-inline');
  expect(page.text()).not.toMatch(/<script[^>]+src=|<link [^>]*href="(?!data:)/); // no external assets
});
