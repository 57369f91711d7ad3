// The long-call setting (docs/long-calls.md): idempotency.async on REST routes; what it compiles
// to, its defaults, and where it is refused.
import type { IdempotencyPolicy } from '../../src/config/types';
import { configIssues, parseYaml } from '../support/config-issues';

function yaml(idempotency: string, defaults = ''): string {
  const lines = idempotency
    .split('\n')
    .map((line) => `      ${line}`)
    .join('\n');
  return `upstreams:\n  api: { url: http://127.0.0.1:4000 }\n${defaults}routes:\n  - name: jobs\n    match: { path: /jobs/** }\n    upstream: api\n    idempotency:\n${lines}\n`;
}

function policy(idempotency: string, defaults = ''): IdempotencyPolicy {
  return parseYaml(yaml(idempotency, defaults)).routes[0]!.idempotency!;
}

const issues = configIssues;

describe('idempotency.async', () => {
  it('is off unless set; true takes the defaults (after 5s, pollInterval 2s)', () => {
    expect(policy('ttl: 1h').async).toBeNull();
    expect(policy('async: true').async).toEqual({ afterMs: 5_000, pollIntervalMs: 2_000 });
    expect(policy('async: { after: 300ms, pollInterval: 1s }').async).toEqual({
      afterMs: 300,
      pollIntervalMs: 1_000,
    });
  });

  it('set in defaults, applies to REST routes and not to MCP ones', () => {
    const defaults = 'defaults:\n  async: { after: 2s }\n';
    expect(policy('ttl: 1h', defaults).async).toEqual({ afterMs: 2_000, pollIntervalMs: 2_000 });
    expect(policy('mcp: true', defaults).async).toBeNull();
  });

  it('is refused on MCP, A2A and profile routes, with what to do instead', () => {
    const mcp = issues(yaml('mcp: true\nasync: true'));
    expect(mcp).toEqual([
      expect.objectContaining({
        path: 'routes[0].idempotency.async',
        message: expect.stringContaining('use mcp.tasks instead of async') as string,
      }),
    ]);
    expect(issues(yaml('a2a: true\nasync: true'))[0]!.message).toMatch(/no respond-async/);
    expect(issues(yaml('profile: acp\nasync: true')).map((issue) => issue.message)).toContainEqual(
      expect.stringContaining('scoped by the request path'),
    );
  });

  it('refuses durations that are not ones, and unknown fields', () => {
    expect(issues(yaml('async: { after: soon }'))[0]!.path).toBe(
      'routes[0].idempotency.async.after',
    );
    expect(issues(yaml('async: { afterr: 1s }'))[0]!.message).toMatch(/afterr/);
  });
});

describe('idempotency.mcp.tasks', () => {
  it('is off unless set; true takes the defaults, ttl the route’s unless given', () => {
    expect(policy('mcp: true').mcp!.tasks).toBeNull();
    expect(policy('mcp: { tasks: true }').mcp!.tasks).toEqual({
      afterMs: 5_000,
      pollIntervalMs: 2_000,
      ttlMs: null,
    });
    expect(
      policy('mcp: { tasks: { after: 1s, ttl: 2h, pollInterval: 500ms } }').mcp!.tasks,
    ).toEqual({ afterMs: 1_000, pollIntervalMs: 500, ttlMs: 7_200_000 });
  });

  it('refuses what is not a duration, and unknown fields', () => {
    expect(issues(yaml('mcp: { tasks: { after: 0s } }'))[0]!.path).toBe(
      'routes[0].idempotency.mcp.tasks.after',
    );
    expect(issues(yaml('mcp: { tasks: { every: 1s } }'))[0]!.message).toMatch(/every/);
  });
});
