// Security regression: paths and methods that a servlet container or a Rails app reads differently
// from RFC 3986 — `;` segment parameters (Tomcat, Spring), `/..;/`, `(.:format)` suffixes, a form,
// multipart, JSON or query `_method` (Rack::MethodOverride, Laravel, Symfony) — and the readings of
// an upstream that trims path tokens or decodes twice. The upstream here reads requests those ways
// and counts what it ran (support/readings-upstream.ts); the invariant is counted on its side: one
// key, at most one execution, and no key, none.
import { expectProblem, withLogLine } from '../support/edge-expect';
import { rawRequest, type RawResponse } from '../support/edge-raw';
import { freshKey } from '../support/edge-refunds';
import { proxyInFrontOf } from '../support/proxy';
import {
  multipart,
  MULTIPART,
  readingsYaml,
  startReadingUpstream,
} from '../support/readings-upstream';

const TENANT = 'Bearer readings-tenant';
const BODY = '{"amount":1000}';
const FORM = 'application/x-www-form-urlencoded';

const running = proxyInFrontOf(startReadingUpstream, readingsYaml);

function post(
  target: string,
  key: string | undefined,
  body: string | Buffer = BODY,
  type = 'application/json',
  extra: [string, string][] = [],
): Promise<RawResponse> {
  const headers: [string, string][] = [['Content-Type', type], ['Authorization', TENANT], ...extra];
  if (key !== undefined) headers.push(['Idempotency-Key', key]);
  return rawRequest(running.proxy.port, { target, headers, body });
}

const problemCode = (res: RawResponse): string =>
  (JSON.parse(res.body.toString()) as { code: string }).code;

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
    const before = running.upstream.ranAtAll('refund');
    const res = await post(target, undefined);
    expect(res.status).toBe(400);
    expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(running.upstream.ranAtAll('refund')).toBe(before);
  });

  test.each(refundSpellings)('%s twice with one key: run once', async (target) => {
    const key = freshKey('spelling');
    const first = await post(target, key);
    const second = await post(target, key);
    expect(first.status).toBe(201);
    expect(second.status).toBe(201);
    expect(second.headers['idempotent-replayed']).toBe('true');
    expect(running.upstream.ran('refund', key)).toBe(1);
  });

  test('/refunds and then each spelling under the same key: one execution in all', async () => {
    const key = freshKey('all-spellings');
    expect((await post('/refunds', key)).status).toBe(201);
    for (const target of refundSpellings) {
      const res = await post(target, key);
      // The same call replays; a spelling kept in the fingerprint (parameters, suffix) is a 422.
      expect([201, 422]).toContain(res.status);
    }
    expect(running.upstream.ran('refund', key)).toBe(1);
  });

  test('/x/..;/refunds is the same call as /refunds (a dot segment): it replays', async () => {
    const key = freshKey('dot-param');
    await post('/refunds', key);
    const res = await post('/x/..;/refunds', key);
    expect(res.status).toBe(201);
    expect(res.headers['idempotent-replayed']).toBe('true');
    expect(running.upstream.ran('refund', key)).toBe(1);
  });

  test('the upstream still receives the ;jsessionid it was sent', async () => {
    const key = freshKey('jsessionid');
    await post('/refunds;jsessionid=abc', key);
    const seen = running.upstream.received.find((r) => r.headers['idempotency-key'] === key);
    expect(seen?.url).toBe('/refunds;jsessionid=abc');
  });
});

describe('readings of upstreams that trim or decode twice are refused', () => {
  test.each(['/refunds%20', '/refunds%09', '/%2572efunds', '/refunds%0A'])(
    '%s: 400 REQUEST_TARGET_INVALID, not run',
    async (target) => {
      const before = running.upstream.ranAtAll('refund');
      const res = await post(target, freshKey('trim'));
      expect(res.status).toBe(400);
      expect(JSON.parse(res.body.toString()).code).toBe('REQUEST_TARGET_INVALID');
      expect(running.upstream.ranAtAll('refund')).toBe(before);
    },
  );
});

// Found by the property in edge-bypass.property.test.ts: each reading was taken alone, so a path that
// only decoding twice AND trimming turns into a protected one, and a `_method` on such a path, passed.
describe('readings combined: decoded twice and trimmed', () => {
  test('/or%2564ers/7/refund%20 is /orders/7/refund to the upstream: 400, never run', async () => {
    const before = running.upstream.ranAtAll('order-refund');
    const res = await post('/or%2564ers/7/refund%20', undefined);
    expectProblem(res, 400, 'REQUEST_TARGET_INVALID');
    expect(running.upstream.ranAtAll('order-refund')).toBe(before);
  });

  test('a multipart _method=DELETE on /%2570ayments/7%20 is removed: the upstream never runs DELETE', async () => {
    const res = await post(
      '/%2570ayments/7%20',
      undefined,
      multipart([['_method', 'DELETE']]),
      MULTIPART,
    );
    expect(res.status).toBe(200);
    expect(running.upstream.ranAtAll('delete-payment')).toBe(0);
    expect(running.upstream.received.at(-1)!.body.toString()).not.toContain('_method');
  });

  test('a _method=DELETE on /%2561ccounts/7%20 (a methodOverride route in that reading): 400', async () => {
    const received = running.upstream.received.length;
    const res = await post('/%2561ccounts/7%20', freshKey('combined'), '_method=DELETE', FORM);
    expectProblem(res, 400, 'REQUEST_TARGET_INVALID');
    expect(running.upstream.received.length).toBe(received);
  });
});

describe('a POST _method cannot reach a protected DELETE unprotected', () => {
  test.each<[string, string | Buffer, string, string]>([
    ['urlencoded', 'note=x&_method=DELETE', FORM, 'note=x'],
    [
      'multipart',
      multipart([
        ['note', 'x'],
        ['_method', 'DELETE'],
      ]),
      MULTIPART,
      'name="note"',
    ],
  ])(
    'in a %s body: removed, so the upstream runs POST, not DELETE',
    async (_kind, body, type, kept) => {
      const res = await post('/payments/42', undefined, body, type);
      expect(res.status).toBe(200);
      expect(running.upstream.ranAtAll('delete-payment')).toBe(0);
      const seen = running.upstream.received.at(-1)!;
      expect(seen.body.toString()).not.toContain('_method');
      expect(seen.body.toString()).toContain(kept);
      expect(seen.headers['content-length']).toBe(String(seen.body.length));
    },
  );

  test('in the query: removed', async () => {
    const res = await post(
      '/payments/43?_method=DELETE&x=1',
      undefined,
      '',
      'application/x-www-form-urlencoded',
    );
    expect(res.status).toBe(200);
    expect(running.upstream.ranAtAll('delete-payment')).toBe(0);
    expect(running.upstream.received.at(-1)!.url).not.toContain('_method');
  });
});

test('the request log keeps no query of a non-canonical target', async () => {
  const res = await rawRequest(running.proxy.port, {
    method: 'GET',
    target: '/x/../other?api_token=SECRET',
  });
  expect(res.status).toBe(200);
  expect(JSON.stringify(running.proxy.logs)).not.toContain('SECRET');
});

describe('a path parameter route (/orders/:id/refund)', () => {
  test.each(['/orders;a/1/refund', '/orders/1;v=2/refund', '/orders/1/refund;jsessionid=x'])(
    '%s: without a key refused and never run; with one key run once',
    async (target) => {
      const before = running.upstream.ranAtAll('order-refund');
      const refused = await post(target, undefined);
      expect(refused.status).toBe(400);
      expect(problemCode(refused)).toBe('IDEMPOTENCY_KEY_MISSING');
      expect(running.upstream.ranAtAll('order-refund')).toBe(before);
      const key = freshKey('order-param');
      expect((await post(target, key)).status).toBe(201);
      expect((await post(target, key)).headers['idempotent-replayed']).toBe('true');
      expect(running.upstream.ran('order-refund', key)).toBe(1);
    },
  );

  test.each(['/orders/1/refund.json', '/orders/1/refund/.xml'])(
    '%s (match.formats): protected as the route, the suffix in the fingerprint',
    async (target) => {
      const before = running.upstream.ranAtAll('order-refund');
      expect((await post(target, undefined)).status).toBe(400);
      expect(running.upstream.ranAtAll('order-refund')).toBe(before);
      const key = freshKey('order-format');
      const first = await post(target, key);
      expect(first.status).toBe(201);
      expect((await post(target, key)).headers['idempotent-replayed']).toBe('true');
      // The same key on the path without the suffix is another request (the upstream may answer
      // JSON and HTML differently): 422, not run again.
      expect((await post('/orders/1/refund', key)).status).toBe(422);
      expect(running.upstream.ran('order-refund', key)).toBe(1);
      expect(running.upstream.received.find((r) => r.headers['idempotency-key'] === key)?.url).toBe(
        target,
      );
    },
  );
});

describe('readings that reach two different protected routes are refused', () => {
  test('/a;x/b is route "any-b" as sent and route "ab" without ";x": 400, never forwarded', async () => {
    const received = running.upstream.received.length;
    const res = await post('/a;x/b', freshKey('two-routes'));
    expectProblem(res, 400, 'REQUEST_TARGET_INVALID');
    expect(res.json<{ detail: string }>().detail).toContain('"ab"');
    expect(running.upstream.received.length).toBe(received);
  });

  test('each reading alone is protected by its own route', async () => {
    const key = freshKey('one-route');
    expect((await post('/a/b', undefined)).status).toBe(400);
    expect((await post('/z/b', key)).status).toBe(200);
    expect((await post('/z/b', key)).headers['idempotent-replayed']).toBe('true');
    expect(
      running.upstream.received.filter((r) => r.headers['idempotency-key'] === key),
    ).toHaveLength(1);
  });
});

describe('a _method the route does not honour never reaches the upstream', () => {
  test('a multipart body the proxy cannot read (no closing delimiter) is refused, not passed on', async () => {
    const received = running.upstream.received.length;
    const whole = multipart([['_method', 'DELETE']]).toString();
    const res = await post(
      '/payments/45',
      undefined,
      whole.slice(0, whole.lastIndexOf('--')),
      MULTIPART,
    );
    expectProblem(res, 400, 'METHOD_OVERRIDE_INVALID');
    expect(running.upstream.received.length).toBe(received);
  });

  // Rack::MethodOverride reads _method from form bodies only, but Laravel's input is the JSON body
  // when there is one, so {"_method":"DELETE"} runs DELETE there. Removing it would rewrite the
  // client's JSON; the proxy refuses it instead, and the upstream never sees it.
  test('in a JSON body: refused with 400, never forwarded', async () => {
    const received = running.upstream.received.length;
    const res = await post('/payments/46', undefined, '{"_method":"DELETE","note":"x"}');
    expectProblem(res, 400, 'METHOD_OVERRIDE_INVALID');
    expect(running.upstream.received.length).toBe(received);
    expect(running.upstream.ranAtAll('delete-payment')).toBe(0);
  });

  test('a JSON "_method" below the top level is not a method and goes through', async () => {
    const res = await post('/payments/47', undefined, '{"note":{"_method":"DELETE"}}');
    expect(res.status).toBe(200);
    expect(running.upstream.ranAtAll('delete-payment')).toBe(0);
  });
});

describe('methodOverride: true honours _method for routing and protection', () => {
  const spellings: [string, string, string | Buffer, string][] = [
    ['urlencoded body', '/accounts/7', 'reason=closed&_method=DELETE', FORM],
    ['multipart body', '/accounts/8', multipart([['_method', 'delete']]), MULTIPART],
    ['query', '/accounts/9?_method=DELETE', 'reason=closed', FORM],
    ['JSON body', '/accounts/11', '{"_method":"DELETE","reason":"closed"}', 'application/json'],
  ];

  test.each(spellings)(
    'POST with _method=DELETE in the %s is a protected DELETE: no key 400, one key one run, replayed',
    async (_where, target, body, type) => {
      const before = running.upstream.ranAtAll('delete-account');
      const refused = await post(target, undefined, body, type);
      expect(refused.status).toBe(400);
      expect(problemCode(refused)).toBe('IDEMPOTENCY_KEY_MISSING');
      expect(running.upstream.ranAtAll('delete-account')).toBe(before);
      const key = freshKey('override');
      const { res: first, line } = await withLogLine(running.proxy, () =>
        post(target, key, body, type),
      );
      expect(first.status).toBe(201);
      expect(line).toMatchObject({
        route: 'account-delete',
        method: 'DELETE',
        outcome: 'executed',
      });
      const again = await post(target, key, body, type);
      expect(again.status).toBe(201);
      expect(again.headers['idempotent-replayed']).toBe('true');
      expect(running.upstream.ran('delete-account', key)).toBe(1);
    },
  );

  test('_method and the override header naming different methods: both removed, the upstream runs POST', async () => {
    const key = freshKey('disagree');
    const res = await post('/accounts/10', key, 'reason=x&_method=DELETE', FORM, [
      ['X-HTTP-Method-Override', 'PUT'],
    ]);
    expect(res.status).toBe(200);
    expect(running.upstream.ranFor(key)).toBe(0);
    const seen = running.upstream.received.at(-1)!;
    expect(seen.body.toString()).toBe('reason=x');
    expect(seen.headers['x-http-method-override']).toBeUndefined();
  });
});

describe('the request log keeps no ";" parameter value', () => {
  test.each([
    ['/refunds;jsessionid=SESSION-SECRET-1', 201],
    ['/x/..;/refunds;jsessionid=SESSION-SECRET-2', 201],
    ['/orders;jsessionid=SESSION-SECRET-3/1/refund', 201],
    ['/refunds;jsessionid=SESSION-SECRET-4%2F', 400],
  ])('%s', async (target, status) => {
    const secret = /SESSION-SECRET-\d/.exec(target)![0];
    const { res, line } = await withLogLine(running.proxy, () => post(target, freshKey('log')));
    expect(res.status).toBe(status);
    expect(JSON.stringify(line)).not.toContain(secret);
    expect(line.path).toContain(';jsessionid=');
  });
});
