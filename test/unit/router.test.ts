import type { RouteConfig } from '../../src/config/types';
import {
  compilePathPattern,
  createRouter,
  parseRequestTarget,
  upstreamPath,
} from '../../src/http/router';

function route(
  name: string,
  path: string,
  extra: Partial<RouteConfig> = {},
  methods: string[] | null = null,
  host: string | null = null,
): RouteConfig {
  return {
    name,
    match: { methods: methods && new Set(methods), path, host },
    upstream: { name: 'u', origin: 'http://u', basePath: '', timeoutMs: 1000 },
    stripPrefix: null,
    idempotency: null,
    ...extra,
  };
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

  test('takes the first route that matches method, host and path', () => {
    expect(router.match('POST', 'x', '/refunds')?.name).toBe('post-refunds');
    expect(router.match('GET', 'x', '/refunds')?.name).toBe('catch-all');
    expect(router.match('GET', 'MAIL.internal:8080', '/mail/x')?.name).toBe('mail');
    expect(router.match('GET', 'other', '/mail/x')?.name).toBe('catch-all');
  });

  test('returns undefined when nothing matches', () => {
    expect(createRouter([routes[0]!]).match('GET', undefined, '/refunds')).toBeUndefined();
  });
});

describe('request targets and upstream paths', () => {
  test('splits origin-form and absolute-form targets', () => {
    expect(parseRequestTarget('/a/b?x=1&y')).toEqual({ path: '/a/b', query: 'x=1&y' });
    expect(parseRequestTarget('/a')).toEqual({ path: '/a', query: '' });
    expect(parseRequestTarget('http://h:1/a?q')).toEqual({ path: '/a', query: 'q' });
    expect(parseRequestTarget('http://h:1')).toEqual({ path: '/', query: '' });
  });

  test('strips the prefix and prepends the upstream base path', () => {
    const mail = route('mail', '/mail/**', {
      stripPrefix: '/mail',
      upstream: { name: 'm', origin: 'http://m', basePath: '/api', timeoutMs: 1 },
    });
    expect(upstreamPath(mail, { path: '/mail/emails', query: 'a=1' })).toBe('/api/emails?a=1');
    expect(upstreamPath(mail, { path: '/mail', query: '' })).toBe('/api');
    expect(upstreamPath(mail, { path: '/mailbox', query: '' })).toBe('/api/mailbox');
    expect(upstreamPath(route('plain', '/**'), { path: '/x', query: '' })).toBe('/x');
  });
});
