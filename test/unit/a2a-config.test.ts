// The `idempotency.a2a` block (src/a2a/README.md): what it compiles to, which methods it protects,
// and the settings it refuses because they would be silently ignored.
import type { IncomingMessage } from 'node:http';
import { configIssues as issues, parseYaml } from '../support/config-issues';
import type { IdempotencyPolicy } from '../../src/config/types';
import { readEdge } from '../../src/http/edge';
import { isBodyNeeded, routeRequest } from '../../src/http/route-request';
import { Runtime } from '../../src/runtime';

function yaml(idempotency: string, extra = ''): string {
  const lines = idempotency
    .split('\n')
    .map((line) => `      ${line}`)
    .join('\n');
  return `upstreams:\n  agent: { url: http://127.0.0.1:4000 }\n${extra}routes:\n  - name: agent\n    match: { path: /a2a/** }\n    upstream: agent\n    idempotency:\n${lines}\n`;
}

const parse = parseYaml;

function policy(text: string): IdempotencyPolicy {
  return parse(yaml(text)).routes[0]!.idempotency!;
}

describe('idempotency.a2a', () => {
  it('marks the route, as a block or as true; other routes have none', () => {
    expect(policy('a2a: {}').a2a).toEqual({});
    expect(policy('a2a: true').a2a).toEqual({});
    expect(policy('ttl: 1h').a2a).toBeNull();
    expect(policy('a2a: {}').mcp).toBeNull();
  });

  it('keeps the route’s onConcurrent (reject by default: a duplicate gets the in-flight error)', () => {
    expect(policy('a2a: {}').onConcurrent).toBe('reject');
    expect(policy('onConcurrent: wait\na2a: {}').onConcurrent).toBe('wait');
  });

  it('refuses mcp beside it, REST keying and fingerprint settings, a2a in defaults, and unknown fields', () => {
    expect(issues(yaml('a2a: {}\nmcp: {}'))[0]).toMatchObject({
      path: 'routes[0].idempotency.a2a',
      message: expect.stringMatching(/not both/),
    });
    expect(issues(yaml('a2a: {}\nkey: { derive: [body] }'))[0]).toMatchObject({
      path: 'routes[0].idempotency.key.derive',
      message: expect.stringMatching(/messageId/),
    });
    expect(issues(yaml('a2a: {}\nkey: { body: /meta/key }'))[0]).toMatchObject({
      path: 'routes[0].idempotency.key.body',
      message: expect.stringMatching(/messageId/),
    });
    expect(issues(yaml('a2a: {}\nfingerprint: { parts: [body] }'))[0]?.path).toBe(
      'routes[0].idempotency.fingerprint',
    );
    expect(issues(yaml('enforce: true', 'defaults: { a2a: {} }\n'))[0]?.path).toBe('defaults.a2a');
    expect(issues(yaml('a2a: { window: 1m }'))[0]?.path).toBe('routes[0].idempotency.a2a.window');
  });
});

describe('methods on an A2A route', () => {
  const runtime = new Runtime(parse(yaml('a2a: {}')));
  afterAll(() => runtime.close());

  function isProtected(method: string, url = '/a2a/rpc'): boolean {
    const req = { method, url, headers: { host: 'proxy' }, rawHeaders: ['Host', 'proxy'] };
    const edge = readEdge(req as unknown as IncomingMessage, runtime.edge);
    if (edge instanceof Error) throw edge;
    const routed = routeRequest(runtime.router, edge);
    if (routed instanceof Error) throw routed;
    if (isBodyNeeded(routed)) throw new Error('an A2A POST never waits for its body to be routed');
    return routed.protected;
  }

  it('protects POST only: GET (a task, the agent card) and DELETE (a push config) pass through', () => {
    expect(isProtected('POST')).toBe(true);
    expect(isProtected('POST', '/a2a/rest/message:send')).toBe(true);
    expect(isProtected('GET', '/a2a/rest/tasks/t-1')).toBe(false);
    expect(isProtected('DELETE', '/a2a/rest/tasks/t-1/pushNotificationConfigs/c')).toBe(false);
    expect(isProtected('PUT')).toBe(false);
  });
});
