// Security regression: paths and methods that a servlet container or a Rails app reads differently
// from RFC 3986 — `;` segment parameters (Tomcat, Spring), `/..;/`, `(.:format)` suffixes, a form or
// query `_method` (Rack::MethodOverride, Laravel, Symfony) — and the readings of an upstream that
// trims path tokens or decodes twice. The upstream here reads requests those ways and counts what it
// ran; the invariant is counted on its side: one key, at most one execution, and no key, none.
import type { IncomingHttpHeaders } from 'node:http';
import { rawRequest, type RawResponse } from '../support/edge-raw';
import { freshKey } from '../support/edge-refunds';
import { startProxy, type TestProxy } from '../support/proxy';
import { startUpstream, type TestUpstream } from '../support/upstream';

const TENANT = 'Bearer readings-tenant';
const BODY = '{"amount":1000}';

/** The path as Tomcat/Spring and then Rails read it: `;…` dropped, dot segments, `.json` off. */
function upstreamReading(target: string): string {
  const raw = target.split('?')[0]!;
  const out: string[] = [];
  for (const segment of decodeURIComponent(raw.replace(/;[^/]*/g, '')).split('/')) {
    if (segment === '..') out.pop();
    else if (segment !== '' && segment !== '.') out.push(segment.trim());
  }
  return `/${out.join('/')}`.replace(/\/?\.(json|xml)$/, '');
}

/** Rack::MethodOverride: a POST's `_method` from the form body or the query wins. */
function upstreamMethod(
  method: string,
  target: string,
  headers: IncomingHttpHeaders,
  body: Buffer,
): string {
  if (method !== 'POST') return method;
  const query = new URLSearchParams(target.split('?')[1] ?? '').get('_method');
  const form = String(headers['content-type'] ?? '').startsWith('application/x-www-form-urlencoded')
    ? new URLSearchParams(body.toString()).get('_method')
    : null;
  return (form ?? query ?? method).toUpperCase();
}

interface Execution {
  readonly endpoint: string;
  readonly key: string;
}

let upstream: TestUpstream;
let proxy: TestProxy;
const executions: Execution[] = [];

beforeAll(async () => {
  upstream = await startUpstream((req, res) => {
    const path = upstreamReading(req.url);
    const method = upstreamMethod(req.method, req.url, req.headers, req.body);
    const key = String(req.headers['idempotency-key'] ?? '');
    let endpoint: string | undefined;
    if (method === 'POST' && path === '/refunds') endpoint = 'refund';
    if (method === 'DELETE' && /^\/payments\/[^/]+$/.test(path)) endpoint = 'delete-payment';
    if (endpoint !== undefined) executions.push({ endpoint, key });
    res.writeHead(endpoint === undefined ? 200 : 201, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ endpoint: endpoint ?? 'other', n: executions.length }));
  });
  proxy = await startProxy({
    yaml: `
store: { table: "\${TEST_TABLE}" }
upstreams:
  app: { url: ${upstream.url} }
routes:
  - name: refunds
    match: { method: POST, path: /refunds, formats: [json, xml] }
    upstream: app
    idempotency:
      tenant: [header:authorization]
  - name: payment-delete
    match: { method: DELETE, path: /payments/:id }
    upstream: app
    idempotency: {}
  - name: everything-else
    match: { path: /** }
    upstream: app
`,
  });
});

afterAll(async () => {
  await proxy?.close();
  await upstream?.close();
});

function post(
  target: string,
  key: string | undefined,
  body = BODY,
  type = 'application/json',
): Promise<RawResponse> {
  const headers: [string, string][] = [
    ['Content-Type', type],
    ['Authorization', TENANT],
  ];
  if (key !== undefined) headers.push(['Idempotency-Key', key]);
  return rawRequest(proxy.port, { target, headers, body });
}

const ran = (endpoint: string, key: string): number =>
  executions.filter((e) => e.endpoint === endpoint && e.key === key).length;
const ranAtAll = (endpoint: string): number =>
  executions.filter((e) => e.endpoint === endpoint).length;

/** Targets the upstream runs as POST /refunds. */
const refundSpellings = [
  '/refunds;jsessionid=1',
  '/x/..;/refunds',
  '/%72efunds;x',
  '/refunds;a=1;b=2',
  '/refunds.json',
  '/refunds/.json',
  '/refunds.xml',
];

describe('every spelling the upstream runs as POST /refunds is protected', () => {
  test.each(refundSpellings)('%s without a key: refused, never run', async (target) => {
    const before = ranAtAll('refund');
    const res = await post(target, undefined);
    expect(res.status).toBe(400);
    expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(ranAtAll('refund')).toBe(before);
  });

  test.each(refundSpellings)('%s twice with one key: run once', async (target) => {
    const key = freshKey('spelling');
    const first = await post(target, key);
    const second = await post(target, key);
    expect(first.status).toBe(201);
    expect(second.status).toBe(201);
    expect(second.headers['idempotent-replayed']).toBe('true');
    expect(ran('refund', key)).toBe(1);
  });

  test('/refunds and then each spelling under the same key: one execution in all', async () => {
    const key = freshKey('all-spellings');
    expect((await post('/refunds', key)).status).toBe(201);
    for (const target of refundSpellings) {
      const res = await post(target, key);
      // The same call replays; a spelling kept in the fingerprint (parameters, suffix) is a 422.
      expect([201, 422]).toContain(res.status);
    }
    expect(ran('refund', key)).toBe(1);
  });

  test('/x/..;/refunds is the same call as /refunds (a dot segment): it replays', async () => {
    const key = freshKey('dot-param');
    await post('/refunds', key);
    const res = await post('/x/..;/refunds', key);
    expect(res.status).toBe(201);
    expect(res.headers['idempotent-replayed']).toBe('true');
    expect(ran('refund', key)).toBe(1);
  });

  test('the upstream still receives the ;jsessionid it was sent', async () => {
    const key = freshKey('jsessionid');
    await post('/refunds;jsessionid=abc', key);
    const seen = upstream.received.find((r) => r.headers['idempotency-key'] === key);
    expect(seen?.url).toBe('/refunds;jsessionid=abc');
  });
});

describe('readings of upstreams that trim or decode twice are refused', () => {
  test.each(['/refunds%20', '/refunds%09', '/%2572efunds', '/refunds%0A'])(
    '%s: 400 REQUEST_TARGET_INVALID, not run',
    async (target) => {
      const before = ranAtAll('refund');
      const res = await post(target, freshKey('trim'));
      expect(res.status).toBe(400);
      expect(JSON.parse(res.body.toString()).code).toBe('REQUEST_TARGET_INVALID');
      expect(ranAtAll('refund')).toBe(before);
    },
  );
});

describe('a POST _method cannot reach a protected DELETE unprotected', () => {
  test('in a urlencoded body: removed, so the upstream runs POST, not DELETE', async () => {
    const res = await post(
      '/payments/42',
      undefined,
      'note=x&_method=DELETE',
      'application/x-www-form-urlencoded',
    );
    expect(res.status).toBe(200);
    expect(ranAtAll('delete-payment')).toBe(0);
    const seen = upstream.received.at(-1)!;
    expect(seen.body.toString()).not.toContain('_method');
    expect(seen.body.toString()).toContain('note=x');
    expect(seen.headers['content-length']).toBe(String(seen.body.length));
  });

  test('in the query: removed', async () => {
    const res = await post(
      '/payments/43?_method=DELETE&x=1',
      undefined,
      '',
      'application/x-www-form-urlencoded',
    );
    expect(res.status).toBe(200);
    expect(ranAtAll('delete-payment')).toBe(0);
    expect(upstream.received.at(-1)!.url).not.toContain('_method');
  });
});

test('the request log keeps no query of a non-canonical target', async () => {
  const res = await rawRequest(proxy.port, {
    method: 'GET',
    target: '/x/../other?api_token=SECRET',
  });
  expect(res.status).toBe(200);
  expect(JSON.stringify(proxy.logs)).not.toContain('SECRET');
});
