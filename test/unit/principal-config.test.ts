// The config of principals and body keys: auth.jwt and jwt:<claim> tenant parts, key.body's RFC
// 6901 pointer, and check's warning about tenants scoped on a credential that is refreshed.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { configIssues as issuesOf, parseYaml } from '../support/config-issues';
import { tenantWarnings } from '../../src/compiler/tenant-warnings';
import { configWarnings } from '../../src/compiler/warnings';
import { parseJsonPointer, valueAtPointer } from '../../src/idempotency/json-pointer';
import { tenantHash } from '../../src/idempotency/tenant';

const AUTH = `auth:
  jwt:
    jwks: https://issuer.test/.well-known/jwks.json
    issuer: https://issuer.test/
    audience: [refunds-api, billing-api]
`;

function yaml(idempotency: string, extra = ''): string {
  return `upstreams:\n  app: { url: http://127.0.0.1:4000 }\n${extra}routes:\n  - name: refunds\n    upstream: app\n    match: { path: /refunds }\n    idempotency: ${idempotency}\n`;
}

const parse = parseYaml;

describe('auth.jwt and jwt:<claim> tenants', () => {
  test('compiles the verifier settings, with defaults, and keeps claim names as written', () => {
    const config = parse(yaml('{ tenant: [jwt:org_ID, header:X-Team] }', AUTH));
    expect(config.auth.jwt).toEqual({
      jwks: { kind: 'url', url: 'https://issuer.test/.well-known/jwks.json' },
      issuer: ['https://issuer.test/'],
      audience: ['refunds-api', 'billing-api'],
      algorithms: ['RS256', 'ES256'],
      clockSkewMs: 30_000,
      cooldownMs: 30_000,
      refreshMs: 600_000,
    });
    const policy = config.routes[0]!.idempotency!;
    expect(policy.tenant).toEqual(['jwt:org_ID', 'header:x-team']);
    expect(policy.tenantClaims).toEqual(['org_ID']);
    // A Connection header naming Authorization would drop what the tenant is read from.
    expect(policy.readsHeaders.has('authorization')).toBe(true);
  });

  test('a jwt:<claim> tenant without auth.jwt is an error at the part, in defaults or on the route', () => {
    const text = `upstreams:\n  app: { url: http://127.0.0.1:4000 }\ndefaults:\n  tenant: [jwt:sub]\nroutes:\n  - name: refunds\n    upstream: app\n    match: { path: /refunds }\n    idempotency: { tenant: [header:x-a, jwt:org_id] }\n`;
    expect(issuesOf(text)).toEqual([
      expect.objectContaining({ path: 'defaults.tenant[0]', line: 4 }),
      expect.objectContaining({ path: 'routes[0].idempotency.tenant[1]', line: 9 }),
    ]);
    expect(issuesOf(text)[0]!.message).toMatch(/configure auth\.jwt/);
  });

  test('refuses symmetric algorithms, an empty audience list and unknown settings, each at its line', () => {
    const bad = `auth:\n  jwt:\n    jwks: https://issuer.test/jwks\n    issuer: https://issuer.test/\n    audience: []\n    algorithms: [HS256]\n    leeway: 5s\n`;
    const issues = issuesOf(yaml('{ tenant: [jwt:sub] }', bad));
    expect(issues.map((issue) => [issue.path, issue.line])).toEqual([
      ['auth.jwt.audience', 7],
      ['auth.jwt.algorithms[0]', 8],
      ['auth.jwt.leeway', 9],
    ]);
  });

  describe('a JWKS file', () => {
    let dir: string;
    beforeAll(() => {
      dir = fs.mkdtempSync(path.join(os.tmpdir(), 'jwks-config-'));
    });
    afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

    const withFile = (name: string, content?: string): string => {
      if (content !== undefined) fs.writeFileSync(path.join(dir, name), content);
      return yaml(
        '{ tenant: [jwt:sub] }',
        `auth:\n  jwt:\n    jwks: ${path.join(dir, name)}\n    issuer: i\n    audience: a\n`,
      );
    };

    test('is read when the config is compiled', () => {
      const key = { kty: 'EC', crv: 'P-256', x: 'x', y: 'y', kid: 'k1' };
      const config = parse(withFile('good.json', JSON.stringify({ keys: [key] })));
      expect(config.auth.jwt!.jwks).toEqual({
        kind: 'file',
        file: path.join(dir, 'good.json'),
        keySet: { keys: [key] },
      });
    });

    test.each([
      ['missing.json', undefined, /cannot read the JWKS file .*ENOENT/],
      ['text.json', 'not json', /is not JSON/],
      ['empty.json', '{"keys":[]}', /has no "keys" list/],
      ['nokty.json', '{"keys":[{"kid":"a"}]}', /keys\[0\] is not a JSON Web Key/],
      ['private.json', '{"keys":[{"kty":"EC","d":"secret"}]}', /holds a private key/],
    ])('%s is an error at auth.jwt.jwks', (name, content, message) => {
      const issues = issuesOf(withFile(name, content));
      expect(issues).toEqual([expect.objectContaining({ path: 'auth.jwt.jwks', line: 5 })]);
      expect(issues[0]!.message).toMatch(message);
    });
  });

  test('a claim hashes by its value and type: a refreshed token with the same claim is one tenant', () => {
    const parts = ['jwt:sub'];
    const first = tenantHash({}, parts, { sub: 'agent-1', iat: 1 });
    expect(tenantHash({ authorization: 'Bearer other' }, parts, { sub: 'agent-1', iat: 2 })).toBe(
      first,
    );
    expect(tenantHash({}, parts, { sub: 'agent-2' })).not.toBe(first);
    expect(tenantHash({}, parts, { sub: 7 })).not.toBe(tenantHash({}, parts, { sub: '7' }));
    // A claim never collides with a header of the same name and value.
    expect(tenantHash({ sub: 'agent-1' }, ['header:sub'])).not.toBe(first);
  });
});

describe('key.body', () => {
  test('compiles an RFC 6901 pointer into unescaped tokens', () => {
    const key = parse(yaml('{ key: { body: "/meta/idempotency~1key/~0x" } }')).routes[0]!
      .idempotency!.key;
    expect(key.body).toEqual(['meta', 'idempotency/key', '~x']);
    expect(key.bodyPointer).toBe('/meta/idempotency~1key/~0x');
  });

  test.each(['meta/key', '', '/a~2b', '/a~'])(
    '%j is not a JSON pointer: an error at its line',
    (pointer) => {
      const issues = issuesOf(yaml(`{ key: { body: "${pointer}" } }`));
      expect(issues).toEqual([
        expect.objectContaining({ path: 'routes[0].idempotency.key.body', line: 7 }),
      ]);
      expect(issues[0]!.message).toMatch(/expected a JSON pointer \(RFC 6901\)/);
    },
  );

  test('reads members and array elements, and nothing else', () => {
    const doc = { a: [{ k: 'v' }], 'x/y': { '~': 1 }, '': 'empty' };
    expect(valueAtPointer(doc, parseJsonPointer('/a/0/k'))).toBe('v');
    expect(valueAtPointer(doc, parseJsonPointer('/x~1y/~0'))).toBe(1);
    expect(valueAtPointer(doc, parseJsonPointer('/'))).toBe('empty');
    expect(valueAtPointer(doc, parseJsonPointer('/a/01/k'))).toBeUndefined();
    expect(valueAtPointer(doc, parseJsonPointer('/a/-'))).toBeUndefined();
    expect(valueAtPointer(doc, parseJsonPointer('/a/length'))).toBeUndefined();
    expect(valueAtPointer(doc, parseJsonPointer('/toString'))).toBeUndefined();
  });
});

describe('check’s warning about credentials as tenants', () => {
  test('warns when a route scopes on Authorization or another bearer header, not on a claim', () => {
    const config = parse(`upstreams:\n  app: { url: http://127.0.0.1:4000 }\n${AUTH}routes:
  - { name: a, upstream: app, match: { path: /a }, idempotency: { tenant: [header:Authorization] } }
  - { name: b, upstream: app, match: { path: /b }, idempotency: { tenant: [header:x-forwarded-access-token] } }
  - { name: c, upstream: app, match: { path: /c }, idempotency: { tenant: [jwt:sub, header:x-org] } }
  - { name: d, upstream: app, match: { path: /d }, idempotency: { tenant: [header:x-api-key] } }
`);
    const warnings = tenantWarnings(config);
    expect(warnings.map((warning) => warning.route)).toEqual(['a', 'b']);
    // What check and startup print.
    expect(configWarnings(config)).toEqual(expect.arrayContaining(warnings));
    expect(warnings[0]!.message).toBe(
      'route "a" scopes keys on header:authorization, a credential: when the caller\'s token is refreshed (or its session cookie renewed) between an attempt and its retry, the retry lands in another scope and runs again. Scope on who the caller is instead: tenant: [jwt:sub] with auth.jwt (config/README.md#auth).',
    );
  });
});
