// The `idempotency.mcp` block (src/mcp/README.md): what it compiles to, which methods it protects,
// and the REST settings it refuses because they would be silently ignored.
import { configIssues as issues, parseYaml } from '../support/config-issues';
import type { IdempotencyPolicy } from '../../src/config/types';
import { readEdge } from '../../src/http/edge';
import { isBodyNeeded, routeRequest } from '../../src/http/route-request';
import { Runtime } from '../../src/runtime';
import type { IncomingMessage } from 'node:http';

function yaml(idempotency: string, extra = ''): string {
  return `upstreams:\n  tools: { url: http://127.0.0.1:4000 }\n${extra}routes:\n  - name: tools\n    match: { path: /mcp }\n    upstream: tools\n    idempotency:\n${idempotency
    .split('\n')
    .map((line) => `      ${line}`)
    .join('\n')}\n`;
}

const parse = parseYaml;

/** The route's compiled policy, from its idempotency lines or a whole config. */
function policy(text: string): IdempotencyPolicy {
  return parse(text.includes('upstreams:') ? text : yaml(text)).routes[0]!.idempotency!;
}

describe('idempotency.mcp', () => {
  it('defaults to every tool, nothing ignored, and waiting on a concurrent duplicate', () => {
    const compiled = policy('mcp: {}');
    expect(compiled.mcp?.tools).toEqual(['*']);
    expect(compiled.mcp?.protects('anything')).toBe(true);
    expect(compiled.mcp?.ignore).toEqual([]);
    expect(compiled.onConcurrent).toBe('wait');
    expect(policy('mcp: true').mcp?.tools).toEqual(['*']);
  });

  it('keeps an onConcurrent that is set, on the route or in defaults', () => {
    expect(policy('onConcurrent: reject\nmcp: {}').onConcurrent).toBe('reject');
    const fromDefaults = yaml('mcp: {}', 'defaults: { onConcurrent: reject }\n');
    expect(policy(fromDefaults).onConcurrent).toBe('reject');
  });

  it('matches tool names exactly and globs with * and ?, nothing else special', () => {
    const mcp = policy('mcp: { tools: ["refund_*", send_email, "v?.charge", "a.b+c"] }').mcp!;
    expect(mcp.protects('refund_full')).toBe(true);
    expect(mcp.protects('refund_')).toBe(true);
    expect(mcp.protects('refund')).toBe(false);
    expect(mcp.protects('send_email')).toBe(true);
    expect(mcp.protects('send_emails')).toBe(false);
    expect(mcp.protects('v2.charge')).toBe(true);
    expect(mcp.protects('v22.charge')).toBe(false);
    expect(mcp.protects('a.b+c')).toBe(true);
    expect(mcp.protects('aXb+c')).toBe(false);
    expect(mcp.protects('get_balance')).toBe(false);
  });

  it('compiles ignore paths relative to the arguments and window into the derived key lifetime', () => {
    const compiled = policy(
      'mcp: { ignore: [arguments.trace_id, arguments.meta.sent_at], window: 10m }',
    );
    expect(compiled.mcp?.ignore).toEqual([['trace_id'], ['meta', 'sent_at']]);
    expect(compiled.key.windowMs).toBe(600_000);
    expect(compiled.key.derive).toBeNull();
    expect(compiled.fingerprint.parts).toEqual([]);
  });

  it('refuses REST keying and fingerprint settings on an MCP route, and mcp in defaults', () => {
    expect(issues(yaml('mcp: {}\nkey: { derive: [body] }')).map((i) => i.path)).toEqual([
      'routes[0].idempotency.key.derive',
    ]);
    expect(issues(yaml('mcp: {}\nfingerprint: { parts: [body] }'))[0]?.message).toMatch(
      /mcp\.ignore/,
    );
    expect(issues(yaml('mcp: {}\nkey: { maxLength: 20 }'))[0]?.path).toBe(
      'routes[0].idempotency.key.maxLength',
    );
    expect(issues(yaml('enforce: true', 'defaults: { mcp: {} }\n'))[0]?.path).toBe('defaults.mcp');
  });

  it('refuses malformed tools and ignore entries with the expected shape', () => {
    expect(issues(yaml('mcp: { tools: [] }'))[0]?.message).toMatch(/at least one tool/);
    expect(issues(yaml('mcp: { tools: ["two words"] }'))[0]?.message).toMatch(/glob/);
    expect(issues(yaml('mcp: { ignore: [trace_id] }'))[0]?.message).toMatch(/arguments\.trace_id/);
    expect(issues(yaml('mcp: { unknown: 1 }'))[0]?.path).toBe('routes[0].idempotency.mcp.unknown');
  });
});

describe('methods on an MCP route', () => {
  const runtime = new Runtime(parse(yaml('mcp: {}')));
  afterAll(() => runtime.close());

  function isProtected(method: string): boolean {
    const req = { method, url: '/mcp', headers: { host: 'proxy' }, rawHeaders: ['Host', 'proxy'] };
    const edge = readEdge(req as unknown as IncomingMessage, runtime.edge);
    if (edge instanceof Error) throw edge;
    const routed = routeRequest(runtime.router, edge);
    if (routed instanceof Error) throw routed;
    if (isBodyNeeded(routed)) throw new Error('an MCP POST never waits for its body to be routed');
    return routed.protected;
  }

  it('protects POST only: GET streams and DELETE ends a session, both pass through', () => {
    expect(isProtected('POST')).toBe(true);
    expect(isProtected('GET')).toBe(false);
    expect(isProtected('DELETE')).toBe(false);
    expect(isProtected('PUT')).toBe(false);
  });
});
