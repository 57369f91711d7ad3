import type { IdempotencyPolicy, RouteConfig } from '../../src/config/types';
import type { EdgeRequest } from '../../src/http/edge';
import { readHeaderFacts } from '../../src/http/header-lines';
import { routeRequest } from '../../src/http/route-request';
import { createRouter } from '../../src/http/router';
import { ProxyError } from '../../src/errors';

const POLICY = { readsHeaders: new Set(['idempotency-key']) } as unknown as IdempotencyPolicy;

function route(name: string, path: string, extra: Partial<RouteConfig> = {}): RouteConfig {
  return {
    name,
    match: { methods: null, path, host: null, strict: false, formats: [] },
    upstream: { name: 'u', origin: 'http://u', basePath: '', timeoutMs: 1000 },
    stripPrefix: null,
    methodOverride: false,
    idempotency: null,
    ...extra,
  };
}

function edge(method: string, path: string, extra: Partial<EdgeRequest> = {}): EdgeRequest {
  return {
    method,
    path,
    query: '',
    authority: 'proxy',
    host: 'proxy',
    overrideMethod: undefined,
    connectionNames: [],
    keepsForwarding: false,
    rawTarget: undefined,
    readings: undefined,
    headers: readHeaderFacts([]),
    ...extra,
  };
}

const router = createRouter([
  route('override', '/override', {
    methodOverride: true,
    idempotency: POLICY,
    match: {
      methods: new Set(['POST']),
      path: '/override',
      host: null,
      strict: false,
      formats: [],
    },
  }),
  route('refunds', '/refunds', { idempotency: POLICY }),
  route('rest', '/**'),
]);

describe('routing a request the edge has read', () => {
  test('a POST overridden to GET on a methodOverride route is still protected (the upstream may honour another header)', () => {
    const routed = routeRequest(router, edge('POST', '/override', { overrideMethod: 'GET' }));
    expect(routed).toMatchObject({
      route: { name: 'override' },
      protected: true,
      target: { method: 'GET', keepsOverride: true },
    });
  });

  test('a GET overridden to POST on a methodOverride route is protected as a POST', () => {
    expect(
      routeRequest(router, edge('GET', '/override', { overrideMethod: 'POST' })),
    ).toMatchObject({
      protected: true,
      target: { method: 'POST' },
    });
  });

  test('override headers that name no known method are a 400 on a methodOverride route', () => {
    const refused = routeRequest(router, edge('POST', '/override', { overrideMethod: null }));
    expect(refused).toBeInstanceOf(ProxyError);
    expect((refused as ProxyError).code).toBe('METHOD_OVERRIDE_INVALID');
  });

  test('elsewhere the request line decides, and the override headers are dropped on the way', () => {
    expect(routeRequest(router, edge('GET', '/refunds', { overrideMethod: 'POST' }))).toMatchObject(
      {
        route: { name: 'refunds' },
        protected: false,
        target: { method: 'GET', keepsOverride: false },
      },
    );
  });

  test('Connection naming a header a protected route reads is a 400; on a pass-through route it is not', () => {
    const conflict = routeRequest(
      router,
      edge('POST', '/refunds', { connectionNames: ['idempotency-key'] }),
    );
    expect((conflict as ProxyError).code).toBe('CONNECTION_HEADER_CONFLICT');
    expect(
      routeRequest(router, edge('POST', '/other', { connectionNames: ['idempotency-key'] })),
    ).toMatchObject({ route: { name: 'rest' }, protected: false });
  });
});
