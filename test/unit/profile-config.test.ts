// `idempotency.profile` (docs/protocol-profiles.md): what a profile compiles to, and what `check`
// refuses on a profile route — each at the line that sets it.
import { configIssues as issues, parseYaml } from '../support/config-issues';
import type { IdempotencyPolicy } from '../../src/config/types';

function yaml(idempotency: string, extra = ''): string {
  const lines = idempotency
    .split('\n')
    .map((line) => `      ${line}`)
    .join('\n');
  return `upstreams:\n  shop: { url: http://127.0.0.1:4000 }\n${extra}routes:\n  - name: checkout\n    match: { path: /checkout_sessions/** }\n    upstream: shop\n    idempotency:\n${lines}\n`;
}

const parse = parseYaml;
const policy = (text: string): IdempotencyPolicy => parse(yaml(text)).routes[0]!.idempotency!;

const TENANT = "tenant: ['header:x-caller']";

describe('idempotency.profile: acp', () => {
  it('compiles to the settings the pipeline reads', () => {
    const acp = policy(`profile: acp\n${TENANT}`);
    expect(acp).toMatchObject({
      profile: 'acp',
      echoKeyAs: 'Idempotency-Key',
      scopeByPath: true,
      unknownOutcome: 'retry',
      onConcurrent: 'reject',
      key: { required: true, maxLength: 255 },
      fingerprint: { parts: [{ kind: 'body' }], ignore: [] },
    });
    expect([200, 201, 409, 422].map(acp.storesStatus)).toEqual([true, true, true, true]);
    expect([500, 502, 503, 504].map(acp.storesStatus)).toEqual([false, false, false, false]);
    expect(acp.fingerprintEpoch).not.toBe(policy(TENANT).fingerprintEpoch);
  });

  it.each([
    ['ttl: 23h', 'ttl', /at least 24h/],
    ['key: { required: false }', 'key.required', /requires a key/],
    ['key: { maxLength: 256 }', 'key.maxLength', /at most 255/],
    ['key: { body: /meta/idempotency_key }', 'key.body', /header only/],
    ['key: { header: X-Key }', 'key.header', /Idempotency-Key/],
    ['key: { derive: [body] }', 'key.derive', /remove key.derive/],
    ['fingerprint: { parts: [body] }', 'fingerprint', /remove fingerprint/],
    ['unknownOutcome: fail', 'unknownOutcome', /5xx/],
    ['onConcurrent: wait', 'onConcurrent', /409/],
    ['onConcurrent: attach', 'onConcurrent', /409/],
    ['enforce: false', 'enforce', /shadow mode/],
    ['mcp: {}', 'profile', /REST binding/],
    ['replayedHeader: X-Replayed', 'replayedHeader', /Idempotent-Replayed: true/],
  ])('refuses %s, at its line', (setting, path, message) => {
    const found = issues(yaml(`profile: acp\n${TENANT}\n${setting}`));
    expect(found).toContainEqual(
      expect.objectContaining({
        path: `routes[0].idempotency.${path}`,
        line: expect.any(Number),
        message: expect.stringMatching(message),
      }),
    );
  });

  it('refuses a route without a tenant, and a ttl under 24 h inherited from defaults', () => {
    expect(issues(yaml('profile: acp'))).toContainEqual(
      expect.objectContaining({ path: 'routes[0].idempotency.profile', line: 8 }),
    );
    expect(issues(yaml(`profile: acp\n${TENANT}`, 'defaults: { ttl: 1h }\n'))).toContainEqual(
      expect.objectContaining({ path: 'defaults.ttl', line: 3 }),
    );
  });

  it('refuses profile in defaults', () => {
    expect(issues(yaml(TENANT, 'defaults: { profile: acp }\n'))).toContainEqual(
      expect.objectContaining({ path: 'defaults.profile' }),
    );
  });
});

describe('idempotency.profile: ucp', () => {
  it('compiles to the settings the pipeline reads', () => {
    const ucp = policy(`profile: ucp\n${TENANT}`);
    expect(ucp).toMatchObject({
      profile: 'ucp',
      echoKeyAs: null,
      scopeByPath: false,
      unknownOutcome: 'fail',
      fingerprint: { parts: [{ kind: 'raw-body' }], ignore: [] },
    });
    expect(ucp.storesStatus(500)).toBe(true);
  });

  it.each([
    ['ttl: 12h', 'ttl'],
    ['enforce: false', 'enforce'],
    ['fingerprint: { parts: [body] }', 'fingerprint'],
  ])('refuses %s, at its line', (setting, path) => {
    expect(issues(yaml(`profile: ucp\n${TENANT}\n${setting}`))).toContainEqual(
      expect.objectContaining({ path: `routes[0].idempotency.${path}`, line: expect.any(Number) }),
    );
  });

  it('accepts key.maxLength above 255 and key.required: false (UCP sets neither)', () => {
    const ucp = policy(`profile: ucp\n${TENANT}\nkey: { maxLength: 400, required: false }`);
    expect(ucp.key).toMatchObject({ maxLength: 400, required: false });
  });

  it('refuses an unknown profile', () => {
    expect(issues(yaml('profile: stripe'))[0]).toMatchObject({
      path: 'routes[0].idempotency.profile',
      message: 'expected acp or ucp, got "stripe"',
    });
  });
});
