import type { RouteConfig } from '../../src/config/types';
import { compilePathPattern, createRouter, upstreamPath } from '../../src/http/router';
import type { IdempotencyPolicy } from '../../src/config/types';

function route(
  name: string,
  path: string,
  extra: Partial<RouteConfig> = {},
  methods: string[] | null = null,
  host: string | null = null,
): RouteConfig {
  return {
    name,
    match: { methods: methods && new Set(methods), path, host, strict: false, formats: [] },
    upstream: { name: 'u', origin: 'http://u', basePath: '', timeoutMs: 1000 },
    stripPrefix: null,
    methodOverride: false,
    idempotency: null,
    ...extra,
  };
}

/** Only the router's question matters here: is the route protected at all. */
const PROTECTED = {} as IdempotencyPolicy;

function request(method: string, host: string | undefined, path: string, override?: string | null) {
  return { method, host, path, overrideMethod: override };
}

describe('path patterns', () => {
  test.each([
    ['/refunds', '/refunds', true],
    ['/refunds', '/refunds/', false],
    ['/refunds', '/refund', false],
    ['/orders/:id/refund', '/orders/42/refund', true],
    ['/orders/:id/refund', '/orders//refund', false],
    ['/orders/:id/refund', '/orders/42/refund/x', false],
    ['/mail/**', '/mail', true],
    ['/mail/**', '/mail/', true],
    ['/mail/**', '/mail/a/b', true],
    ['/mail/**', '/mailbox', false],
    ['/**', '/anything/at/all', true],
    ['/t/:tenant/**', '/t/acme/x/y', true],
    ['/t/:tenant/**', '/u/acme/x', false],
  ])('%s matches %s: %s', (pattern, path, expected) => {
    expect(compilePathPattern(pattern)(path)).toBe(expected);
  });
});

describe('router', () => {
  const routes = [
    route('post-refunds', '/refunds', {}, ['POST']),
    route('mail', '/mail/**', {}, null, 'mail.internal'),
    route('catch-all', '/**'),
  ];
  const router = createRouter(routes);
  const name = (...args: Parameters<typeof request>) => router.match(request(...args))?.route.name;

  test('takes the first route that matches method, host and path', () => {
    expect(name('POST', 'x', '/refunds')).toBe('post-refunds');
    expect(name('GET', 'x', '/refunds')).toBe('catch-all');
    expect(name('GET', 'mail.internal', '/mail/x')).toBe('mail');
    expect(name('GET', 'other', '/mail/x')).toBe('catch-all');
    expect(name('GET', undefined, '/mail/x')).toBe('catch-all');
  });

  test('returns undefined when nothing matches', () => {
    expect(createRouter([routes[0]!]).match(request('GET', undefined, '/refunds'))).toBeUndefined();
  });

  test('pass-through routes match exactly: case and a trailing slash count', () => {
    const exact = createRouter([route('plain', '/refunds', {}, ['POST'])]);
    expect(exact.match(request('POST', 'x', '/refunds'))).toBeDefined();
    expect(exact.match(request('POST', 'x', '/refunds/'))).toBeUndefined();
    expect(exact.match(request('POST', 'x', '/Refunds'))).toBeUndefined();
  });

  test.each([
    ['/refunds', '/refunds/', true],
    ['/refunds', '/REFUNDS', true],
    ['/refunds', '/Refunds/', true],
    ['/refunds', '/refunds//', false],
    ['/refunds', '/refundsx', false],
    ['/orders/:id/refund', '/Orders/AB12/Refund/', true],
    ['/mail/**', '/MAIL/emails', true],
    ['/', '/', true],
  ])('a protected route with path %s matches %s leniently: %s', (pattern, path, expected) => {
    const lenient = createRouter([route('r', pattern, { idempotency: PROTECTED }, ['POST'])]);
    expect(lenient.match(request('POST', 'x', path)) !== undefined).toBe(expected);
  });

  test('match.strict: true makes a protected route match exactly', () => {
    const strict = route('r', '/refunds', { idempotency: PROTECTED }, ['POST']);
    const router = createRouter([{ ...strict, match: { ...strict.match, strict: true } }]);
    expect(router.match(request('POST', 'x', '/refunds'))).toBeDefined();
    expect(router.match(request('POST', 'x', '/refunds/'))).toBeUndefined();
    expect(router.match(request('POST', 'x', '/REFUNDS'))).toBeUndefined();
  });

  test('routes with methodOverride match by the overriding method; others by the request line', () => {
    const overriding = createRouter([
      route('refunds', '/refunds', { methodOverride: true, idempotency: PROTECTED }, ['POST']),
      route('rest', '/**'),
    ]);
    expect(overriding.match(request('GET', 'x', '/refunds', 'POST'))).toMatchObject({
      route: { name: 'refunds' },
      method: 'POST',
    });
    expect(overriding.match(request('GET', 'x', '/refunds', undefined))?.route.name).toBe('rest');
    expect(overriding.match(request('GET', 'x', '/refunds', null))?.route.name).toBe('rest');
    // Never handed on by the overriding method alone: the next route would strip the header.
    expect(overriding.match(request('POST', 'x', '/refunds', 'GET'))).toMatchObject({
      route: { name: 'refunds' },
      method: 'GET',
    });
    const plain = createRouter([route('refunds', '/refunds', {}, ['POST']), route('rest', '/**')]);
    expect(plain.match(request('GET', 'x', '/refunds', 'POST'))).toMatchObject({
      route: { name: 'rest' },
      method: 'GET',
    });
  });
});

describe('upstream paths', () => {
  const mail = route('mail', '/mail/**', {
    stripPrefix: '/mail',
    upstream: { name: 'm', origin: 'http://m', basePath: '/api', timeoutMs: 1 },
  });

  test('strips the prefix and prepends the upstream base path', () => {
    expect(upstreamPath(mail, { path: '/mail/emails', query: 'a=1' })).toBe('/api/emails?a=1');
    expect(upstreamPath(mail, { path: '/mail', query: '' })).toBe('/api');
    expect(upstreamPath(mail, { path: '/mailbox', query: '' })).toBe('/api/mailbox');
    expect(upstreamPath(route('plain', '/**'), { path: '/x', query: '' })).toBe('/x');
  });

  test('strips the prefix in any case where the route matched leniently, exactly elsewhere', () => {
    expect(upstreamPath({ ...mail, idempotency: PROTECTED }, { path: '/MAIL/x', query: '' })).toBe(
      '/api/x',
    );
    expect(upstreamPath(mail, { path: '/MAIL/x', query: '' })).toBe('/api/MAIL/x');
  });

  test('never leaves the base path: a dot segment that reached it is refused', () => {
    expect(upstreamPath(mail, { path: '/mail/../x', query: '' })).toBeUndefined();
    expect(upstreamPath(mail, { path: '/mail/./x', query: '' })).toBeUndefined();
    expect(upstreamPath(route('plain', '/**'), { path: '/a/..', query: '' })).toBeUndefined();
  });
});

describe('match.formats', () => {
  const withFormats = (path: string, extra: Partial<RouteConfig['match']> = {}): RouteConfig => {
    const base = route(path.slice(1), path, { idempotency: PROTECTED }, ['POST']);
    return { ...base, match: { ...base.match, formats: ['json', 'xml'], ...extra } };
  };
  const router = createRouter([
    withFormats('/refunds'),
    withFormats('/orders/:id/refund'),
    withFormats('/strict', { strict: true }),
    route('plain', '/plain', { idempotency: PROTECTED }, ['POST']),
    route('rest', '/**'),
  ]);
  const name = (path: string) => router.match(request('POST', 'x', path))?.route.name;

  test.each([
    ['/refunds.json', 'refunds'],
    ['/refunds.xml', 'refunds'],
    ['/refunds/.json', 'refunds'],
    ['/refunds.json/', 'refunds'],
    ['/REFUNDS.JSON', 'refunds'],
    ['/orders/1/refund.json', 'orders/:id/refund'],
    ['/orders/1/refund/.xml', 'orders/:id/refund'],
    ['/strict.json', 'strict'],
    ['/strict/.json', 'strict'],
  ])('%s takes route %s', (path, expected) => {
    expect(name(path)).toBe(expected);
  });

  test.each([
    ['/refunds.html', 'another format'],
    ['/refunds.json.json', 'two suffixes'],
    ['/refundsjson', 'no dot'],
    ['/.json', 'a suffix alone'],
    ['/plain.json', 'a route without formats'],
    ['/STRICT.json', 'a strict route in another case'],
    ['/strict.JSON', 'a strict route, the suffix in another case'],
    ['/orders.json/1/refund', 'a suffix inside the path'],
  ])('%s (%s) does not', (path) => {
    expect(name(path)).toBe('rest');
  });
});

describe('methodParamLimit: could a _method turn this POST into a protected method elsewhere', () => {
  const policy = (bytes: number) =>
    ({ maxRequestBytes: bytes, mcp: null }) as unknown as IdempotencyPolicy;
  const deletes = route('delete', '/payments/:id', { idempotency: policy(1000) }, ['DELETE']);
  const puts = route('put', '/payments/**', { idempotency: policy(5000) }, ['PUT'], 'api.local');
  const posts = route('post', '/refunds', { idempotency: policy(9000) }, ['POST']);
  const rest = route('rest', '/**');
  const router = createRouter([posts, deletes, puts, rest]);

  test('a path a DELETE route protects: its maxRequestBytes', () => {
    expect(router.methodParamLimit('x', ['/payments/1'], rest, false)).toBe(1000);
  });

  test('several such routes: the largest limit; a route for another host does not count', () => {
    expect(router.methodParamLimit('api.local', ['/payments/1'], rest, false)).toBe(5000);
    expect(router.methodParamLimit('other', ['/payments/1/x'], rest, false)).toBeUndefined();
  });

  test('any reading of the path counts', () => {
    expect(router.methodParamLimit('x', ['/payments;x/1', '/payments/1'], rest, false)).toBe(1000);
  });

  test('a route that protects only POST is no target, and paths no such route takes need no body', () => {
    expect(router.methodParamLimit('x', ['/refunds'], rest, false)).toBeUndefined();
    expect(router.methodParamLimit('x', ['/other'], rest, false)).toBeUndefined();
  });

  test('the route the POST is already protected by does not count itself', () => {
    const any = route('any', '/things/:id', { idempotency: policy(700) });
    const own = createRouter([any, rest]);
    expect(own.methodParamLimit('x', ['/things/1'], any, true)).toBeUndefined();
    expect(own.methodParamLimit('x', ['/things/1'], rest, false)).toBe(700);
  });
});
