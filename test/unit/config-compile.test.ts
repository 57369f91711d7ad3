// From parsed YAML to the frozen ProxyConfig: defaults, merging, units, cross-field checks, and the
// resolved view `check` prints.
import fs from 'node:fs';
import path from 'node:path';
import { describeConfig, describeStored } from '../../src/compiler/describe';
import { maskPassword } from '../../src/db/masked-url';
import { parseConfigText } from '../../src/compiler/load';
import type { IdempotencyPolicy, ProxyConfig } from '../../src/config/types';
import { ConfigError, type ConfigIssue } from '../../src/errors';
import { problemJson } from '../../src/http/problem';

const SPEC_EXAMPLE = fs.readFileSync(
  path.join(__dirname, '../fixtures/config/spec-example.yaml'),
  'utf8',
);

/**
 * One upstream and one route named orders with the given lines (indented as route keys; a
 * `match: { path: /orders }` line is added when they have none). `extra` goes before `routes:`.
 */
function routeYaml(routeLines: string, extra = ''): string {
  const match = routeLines.includes('match:') ? '' : '    match: { path: /orders }\n';
  return `upstreams:\n  app: { url: http://127.0.0.1:4000 }\n${extra}routes:\n  - name: orders\n    upstream: app\n${match}${routeLines}`;
}

function parse(text: string, env: NodeJS.ProcessEnv = {}): ProxyConfig {
  return parseConfigText(text, 'proxy.yaml', env);
}

function policyOf(text: string): IdempotencyPolicy {
  const policy = parse(text).routes[0]!.idempotency;
  if (policy === null) throw new Error('expected a protected route');
  return policy;
}

function issuesOf(text: string, env: NodeJS.ProcessEnv = {}): ConfigIssue[] {
  try {
    parse(text, env);
  } catch (error) {
    if (error instanceof ConfigError) return [...error.issues];
    throw error;
  }
  throw new Error('expected a ConfigError');
}

describe('defaults', () => {
  const config = parse(
    routeYaml('    match: { method: POST, path: /orders }\n    idempotency: {}\n'),
  );

  it('fills the server settings from the built-in defaults', () => {
    expect(config.listen).toEqual({
      host: '0.0.0.0',
      port: 8080,
      maxRequestHeaders: 100,
      maxBodyBytesInFlight: 64 * 1024 * 1024,
    });
    expect(config.shutdownGraceMs).toBe(10_000);
    expect(config.admin).toEqual({ host: '127.0.0.1', port: 9090, token: undefined });
    expect(config.store).toEqual({
      url: undefined,
      dataDir: path.resolve(process.cwd(), '.data/postgres'),
      table: 'idempotency_keys',
      poolSize: 10,
      pruneIntervalMs: 300_000,
      replayCacheBytes: 32 * 1024 * 1024,
      listenProbeIntervalMs: 5_000,
      listenProbeTimeoutMs: 2_000,
      synchronousCommit: true,
      migrate: true,
      tls: undefined,
      outbox: {
        maxWrites: 10_000,
        maxBytes: 64 * 1024 * 1024,
        holdMs: 2_000,
        drainTimeoutMs: 30_000,
        // The embedded PostgreSQL's spool, beside its data directory.
        spool: path.resolve(process.cwd(), '.data/postgres-spool'),
        spoolMaxBytes: 1024 * 1024 * 1024,
      },
    });
    expect(config.upstreams.get('app')).toEqual({
      name: 'app',
      origin: 'http://127.0.0.1:4000',
      basePath: '',
      timeoutMs: 30_000,
    });
  });

  it('fills every idempotency field of a protected route from the built-in defaults', () => {
    const { storesStatus, fingerprintEpoch, errorShape, ...policy } =
      config.routes[0]!.idempotency!;
    expect(fingerprintEpoch).toMatch(/^[\w-]{16}$/);
    expect(errorShape).toBe(problemJson);
    expect(policy).toEqual({
      scope: 'orders',
      key: {
        header: 'idempotency-key',
        forward: 'raw',
        required: true,
        maxLength: 255,
        body: null,
        bodyPointer: null,
        derive: null,
        windowMs: null,
      },
      forwardKeyAs: 'Idempotency-Key',
      ttlMs: 86_400_000,
      lockTimeoutMs: 60_000,
      unknownOutcome: 'fail',
      onConcurrent: 'reject',
      waitTimeoutMs: 10_000,
      fingerprint: {
        parts: [{ kind: 'method' }, { kind: 'path' }, { kind: 'query' }, { kind: 'body' }],
        ignore: [],
      },
      tenant: [],
      tenantClaims: [],
      maxRequestBytes: 1_048_576,
      maxResponseBytes: 8_388_608,
      replayedHeader: 'Idempotent-Replayed',
      streams: {
        contentTypes: new Set(['text/event-stream', 'application/x-ndjson']),
        chunked: false,
      },
      enforce: true,
      allowSafeMethods: false,
      replaySetCookie: false,
      logKey: 'plain',
      maxWaitersPerKey: 1000,
      mcp: null,
      a2a: null,
      async: null,
      reconcile: null,
      profile: null,
      echoKeyAs: null,
      scopeByPath: false,
      dropReplayHeaders: new Set([
        'www-authenticate',
        'authentication-info',
        'proxy-authentication-info',
      ]),
      readsHeaders: new Set(['idempotency-key', 'content-type']),
    });
    expect([200, 303, 404, 500].map(storesStatus)).toEqual([true, true, true, true]);
    expect([408, 425, 429, 503, 101].map(storesStatus)).toEqual([
      false,
      false,
      false,
      false,
      false,
    ]);
  });

  it('collects every header the key, tenant, fingerprint and derived key read', () => {
    const route = parse(
      routeYaml(
        [
          '    match: { path: /orders }',
          '    idempotency:',
          '      key: { header: X-Key, required: false, derive: [body, header:X-Run-Id] }',
          '      tenant: [header:Authorization]',
          '      fingerprint: { parts: [method, header:x-account] }',
          '',
        ].join('\n'),
      ),
    ).routes[0]!;
    expect(route.idempotency!.readsHeaders).toEqual(
      new Set(['x-key', 'authorization', 'x-account', 'x-run-id', 'content-type']),
    );
  });

  it("takes a route's dropReplayHeaders instead of the defaults', lower-cased", () => {
    const route = parse(
      routeYaml(
        '    match: { path: /orders }\n    idempotency: { dropReplayHeaders: [X-Session] }\n',
      ),
    ).routes[0]!;
    expect(route.idempotency!.dropReplayHeaders).toEqual(new Set(['x-session']));
  });

  it('reads trustedProxies, strict matching and methodOverride', () => {
    const route = parse(
      routeYaml(
        '    match: { path: /orders, strict: true }\n    methodOverride: true\n    idempotency: true\n',
      ),
    ).routes[0]!;
    expect(route.match.strict).toBe(true);
    expect(route.methodOverride).toBe(true);
    const trusting = parse(
      routeYaml('    idempotency: true\n', 'trustedProxies: [10.0.0.0/8, "::1", 127.0.0.1]\n'),
    );
    expect(trusting.trustedProxies).toEqual(['10.0.0.0/8', '::1', '127.0.0.1']);
    expect(() =>
      parse(routeYaml('    idempotency: true\n', 'trustedProxies: [10.0.0.0/33, proxy.local]\n')),
    ).toThrow(
      /trustedProxies\[0\]: expected an IP address or CIDR[^]*trustedProxies\[1\]: expected an IP address or CIDR/,
    );
  });

  it('freezes the result', () => {
    expect(Object.isFrozen(config)).toBe(true);
    expect(Object.isFrozen(config.routes[0]!.idempotency!.fingerprint.parts)).toBe(true);
  });

  it.each([
    ['true', '    idempotency: true\n'],
    ['an empty mapping', '    idempotency: {}\n'],
  ])('protects a route whose idempotency is %s', (_, line) => {
    expect(
      parse(routeYaml(`    match: { path: /orders }\n${line}`)).routes[0]!.idempotency,
    ).not.toBeNull();
  });

  it.each([
    ['false', '    idempotency: false\n'],
    ['absent', ''],
  ])('passes a route through when idempotency is %s', (_, line) => {
    const route = parse(routeYaml(`    match: { path: /** }\n${line}`)).routes[0]!;
    expect(route.idempotency).toBeNull();
    expect(route.match).toEqual({
      methods: null,
      path: '/**',
      host: null,
      strict: false,
      formats: [],
    });
  });
});

describe('merging defaults into routes', () => {
  const defaults = `defaults:
  key: { header: X-Request-Key, maxLength: 64 }
  fingerprint: { parts: [method, body] }
  ttl: 1h
  tenant: [header:X-Tenant]
`;

  it('applies the defaults block over the built-in defaults', () => {
    const policy = policyOf(routeYaml('    idempotency: true\n', defaults));
    expect(policy.key).toMatchObject({ header: 'x-request-key', required: true, maxLength: 64 });
    expect(policy.ttlMs).toBe(3_600_000);
    expect(policy.tenant).toEqual(['header:x-tenant']);
    expect(policy.fingerprint.parts).toEqual([{ kind: 'method' }, { kind: 'body' }]);
  });

  it('merges key and fingerprint field by field, and replaces other fields whole', () => {
    const route = `    idempotency:
      key: { required: false }
      fingerprint: { ignore: [body.meta.sent_at] }
      tenant: []
`;
    const policy = policyOf(routeYaml(route, defaults));
    expect(policy.key).toMatchObject({ header: 'x-request-key', required: false, maxLength: 64 });
    expect(policy.fingerprint).toEqual({
      parts: [{ kind: 'method' }, { kind: 'body' }],
      ignore: [['meta', 'sent_at']],
    });
    expect(policy.tenant).toEqual([]);
    expect(policy.ttlMs).toBe(3_600_000);
  });

  it('compiles every kind of request part', () => {
    const route = `    idempotency:
      fingerprint: { parts: [method, path, query, body, body.a.b, header:X-Run-Id, query.page] }
`;
    expect(policyOf(routeYaml(route)).fingerprint.parts).toEqual([
      { kind: 'method' },
      { kind: 'path' },
      { kind: 'query' },
      { kind: 'body' },
      { kind: 'body-field', path: ['a', 'b'] },
      { kind: 'header', name: 'x-run-id' },
      { kind: 'query-param', name: 'page' },
    ]);
  });

  it('uses the group as the scope, and the route name without one', () => {
    expect(policyOf(routeYaml('    idempotency: { group: billing }\n')).scope).toBe('billing');
  });

  it('names the fingerprint policy: alike for alike policies, apart for anything the fingerprint reads', () => {
    const epoch = (block: string) =>
      policyOf(routeYaml(`    idempotency: ${block}\n`)).fingerprintEpoch;
    const base = epoch('{ fingerprint: { ignore: [body.sent_at] } }');
    // What the fingerprint does not read leaves the name alone: a reload keeps the cache's entries.
    expect(epoch('{ fingerprint: { ignore: [body.sent_at] }, ttl: 1h, group: billing }')).toBe(
      base,
    );
    for (const other of [
      '{}',
      '{ fingerprint: { ignore: [body.sent_at, body.trace] } }',
      '{ fingerprint: { ignore: [body.trace] } }',
      '{ fingerprint: { parts: [method, path, body], ignore: [body.sent_at] } }',
      '{ mcp: { ignore: [arguments.sent_at] } }',
    ])
      expect(epoch(other)).not.toBe(base);
    expect(epoch('{ mcp: {} }')).not.toBe(epoch('{ mcp: { ignore: [arguments.trace] } }'));
  });

  it('strips the key upstream with forwardKeyAs: false', () => {
    expect(
      policyOf(routeYaml('    idempotency: { forwardKeyAs: false }\n')).forwardKeyAs,
    ).toBeNull();
  });
});

describe('storesStatus', () => {
  it('stores whole classes and explicit statuses, and release wins over both', () => {
    const stores = policyOf(
      routeYaml('    idempotency: { store: ["2xx", 404, 409], release: [202, 409] }\n'),
    ).storesStatus;
    expect([200, 201, 299, 404].map(stores)).toEqual([true, true, true, true]);
    expect([202, 409, 400, 500, 302, 700, -1, 200.5].map(stores)).toEqual(Array(8).fill(false));
  });

  it('is summarised by describeStored', () => {
    const stores = policyOf(
      routeYaml('    idempotency: { store: ["2xx", 404], release: [204] }\n'),
    );
    expect(describeStored(stores.storesStatus)).toBe('2xx, 404 except 204');
  });
});

describe('upstreams, hosts and environment', () => {
  it('splits an upstream URL into origin and base path without a trailing slash', () => {
    const config = parse(
      routeYaml('    match: { path: /** }\n').replace(
        'app: { url: http://127.0.0.1:4000 }',
        'app: { url: "HTTPS://Mail.Internal:8443/api/v1/" }\n  root: { url: http://x.test/ }',
      ),
    );
    expect(config.upstreams.get('app')).toMatchObject({
      origin: 'https://mail.internal:8443',
      basePath: '/api/v1',
    });
    expect(config.upstreams.get('root')).toMatchObject({ origin: 'http://x.test', basePath: '' });
  });

  it.each([
    ['ftp://files.test', 'expected an http:// or https:// URL, got "ftp://files.test"'],
    ['http://u:p@x.test', 'expected a URL without credentials'],
    ['http://x.test/api?v=1', 'expected a URL without a query or fragment'],
  ])('rejects the upstream URL %s', (url, message) => {
    const text = routeYaml('    match: { path: /** }\n').replace(
      'http://127.0.0.1:4000',
      `"${url}"`,
    );
    expect(issuesOf(text)).toEqual([{ path: 'upstreams.app.url', line: 2, column: 15, message }]);
  });

  it('lets DATABASE_URL override store.url, and treats empty values as unset', () => {
    const text = routeYaml('    match: { path: /** }\n', 'store: { url: "postgres://file/db" }\n');
    expect(parse(text, { DATABASE_URL: 'postgres://env/db' }).store.url).toBe('postgres://env/db');
    expect(parse(text, { DATABASE_URL: '' }).store.url).toBe('postgres://file/db');
    expect(parse(routeYaml('    match: { path: /** }\n')).store.url).toBeUndefined();
  });

  it('lower-cases hosts and upper-cases methods', () => {
    const route = parse(routeYaml('    match: { method: [post, PUT], host: Mail.Internal }\n'))
      .routes[0]!;
    expect(route.match.host).toBe('mail.internal');
    expect([...route.match.methods!]).toEqual(['POST', 'PUT']);
  });
});

describe('cross-field checks', () => {
  it('rejects a table name with SQL in it', () => {
    const text = routeYaml('    match: { path: /** }\n', 'store:\n  table: "keys; drop table x"\n');
    expect(issuesOf(text)).toEqual([
      {
        path: 'store.table',
        line: 4,
        column: 10,
        message:
          'expected a plain SQL identifier: lower-case letters, digits and "_", not starting with a digit, got "keys; drop table x"',
      },
    ]);
  });

  it('rejects a table name longer than 50 characters', () => {
    const text = routeYaml('    match: { path: /** }\n', `store: { table: ${'k'.repeat(51)} }\n`);
    expect(issuesOf(text)[0]?.message).toMatch(/^expected at most 50 characters/);
  });

  it('rejects an unknown upstream, naming the known ones', () => {
    expect(
      issuesOf(
        routeYaml('    match: { path: /** }\n').replace('upstream: app', 'upstream: billing'),
      ),
    ).toEqual([
      {
        path: 'routes[0].upstream',
        line: 5,
        column: 15,
        message: 'unknown upstream "billing"; expected one of: app',
      },
    ]);
  });

  it('rejects a duplicate route name at the second one', () => {
    const text = `${routeYaml('    match: { path: /a }\n')}  - name: orders\n    upstream: app\n    match: { path: /b }\n`;
    expect(issuesOf(text)).toEqual([
      {
        path: 'routes[1].name',
        line: 7,
        column: 11,
        message: 'duplicate route name "orders"; routes[0] already uses it',
      },
    ]);
  });

  it('rejects a safe method on a protected route unless allowSafeMethods is true', () => {
    const route = '    match: { method: [POST, GET], path: /orders }\n    idempotency: {}\n';
    expect(issuesOf(routeYaml(route))).toEqual([
      {
        path: 'routes[0].match.method[1]',
        line: 6,
        column: 29,
        message:
          'GET is a safe method and already idempotent; a protected route may list it only with idempotency.allowSafeMethods: true (unlisted, it passes through)',
      },
    ]);
    const allowed = route.replace('{}', '{ allowSafeMethods: true }');
    expect(parse(routeYaml(allowed)).routes[0]!.idempotency!.allowSafeMethods).toBe(true);
    expect(parse(routeYaml(route.replace('{}', 'false'))).routes[0]!.idempotency).toBeNull();
  });

  it('accepts a stripPrefix made of the path pattern’s leading literal segments', () => {
    const route = parse(routeYaml('    match: { path: /mail/:id/** }\n    stripPrefix: /mail\n'))
      .routes[0]!;
    expect(route.stripPrefix).toBe('/mail');
  });

  it.each([
    ['/ma', '/mail/emails'],
    ['/mail/x', '/mail/**'],
    ['/orders/1', '/orders/:id'],
    ['/mail', '/**'],
  ])('rejects stripPrefix %s for path %s', (prefix, pattern) => {
    const issues = issuesOf(
      routeYaml(`    match: { path: "${pattern}" }\n    stripPrefix: ${prefix}\n`),
    );
    expect(issues).toEqual([
      expect.objectContaining({ path: 'routes[0].stripPrefix', line: 7, column: 18 }),
    ]);
    expect(issues[0]!.message).toBe(
      `expected a prefix of match.path "${pattern}" made of its literal segments (every path the route matches must start with it)`,
    );
  });

  it.each(['/a/**/b', '/a/:1x', 'a/b', '/a/*'])('rejects the path pattern %s', (pattern) => {
    expect(issuesOf(routeYaml(`    match: { path: "${pattern}" }\n`))[0]?.path).toBe(
      'routes[0].match.path',
    );
  });

  it('rejects key.window without key.derive', () => {
    expect(issuesOf(routeYaml('    idempotency:\n      key: { window: 10m }\n'))).toEqual([
      {
        path: 'routes[0].idempotency.key.window',
        line: 8,
        column: 22,
        message:
          'key.window is only allowed together with key.derive (it is a derived key’s lifetime)',
      },
    ]);
  });

  it('rejects an admin port equal to the listen port', () => {
    const text = routeYaml('    match: { path: /** }\n', 'admin: { port: 8080 }\n');
    expect(issuesOf(text)).toEqual([
      {
        path: 'admin.port',
        line: 3,
        column: 16,
        message: 'expected a port other than listen.port',
      },
    ]);
  });
});

describe('derived keys, shadow mode and onConcurrent: wait', () => {
  it('accepts onConcurrent: wait now that it is built', () => {
    expect(policyOf(routeYaml('    idempotency:\n      onConcurrent: wait\n')).onConcurrent).toBe(
      'wait',
    );
  });

  it('compiles key.derive into request parts and key.window into milliseconds', () => {
    const policy = policyOf(
      routeYaml(
        '    idempotency:\n      key: { required: false, derive: [body, body.order.id, "header:X-Run-Id", query.x], window: 10m }\n',
      ),
    );
    expect(policy.key).toEqual({
      header: 'idempotency-key',
      forward: 'raw',
      required: false,
      maxLength: 255,
      body: null,
      bodyPointer: null,
      derive: [
        { kind: 'body' },
        { kind: 'body-field', path: ['order', 'id'] },
        { kind: 'header', name: 'x-run-id' },
        { kind: 'query-param', name: 'x' },
      ],
      windowMs: 600_000,
    });
  });

  it('keeps windowMs null when key.derive has no window (the record then lives for ttl)', () => {
    const policy = policyOf(routeYaml('    idempotency:\n      key: { derive: [body] }\n'));
    expect(policy.key.derive).toEqual([{ kind: 'body' }]);
    expect(policy.key.windowMs).toBeNull();
  });

  it('inherits key.derive and key.window from defaults, merged field by field', () => {
    const text = routeYaml(
      '    idempotency:\n      key: { required: false }\n',
      'defaults: { key: { derive: [body], window: 30s } }\n',
    );
    expect(policyOf(text).key).toMatchObject({
      required: false,
      derive: [{ kind: 'body' }],
      windowMs: 30_000,
    });
  });

  it('compiles enforce: false (shadow mode), in a route or in defaults', () => {
    expect(policyOf(routeYaml('    idempotency:\n      enforce: false\n')).enforce).toBe(false);
    const inherited = routeYaml('    idempotency: true\n', 'defaults: { enforce: false }\n');
    expect(policyOf(inherited).enforce).toBe(false);
  });

  it('rejects a key.maxLength too short for a derived key, where the maxLength is written', () => {
    expect(
      issuesOf(routeYaml('    idempotency:\n      key: { maxLength: 50, derive: [body] }\n')),
    ).toEqual([
      {
        path: 'routes[0].idempotency.key.maxLength',
        line: 8,
        column: 25,
        message:
          'expected at least 51 with key.derive: a derived key ("derived:" and a base64url SHA-256) is 51 characters long',
      },
    ]);
    const inDefaults = routeYaml(
      '    idempotency:\n      key: { derive: [body] }\n',
      'defaults: { key: { maxLength: 40 } }\n',
    );
    expect(issuesOf(inDefaults)).toEqual([
      expect.objectContaining({ path: 'defaults.key.maxLength', line: 3 }),
    ]);
  });

  it('accepts key.maxLength of exactly the derived key length', () => {
    const text = routeYaml('    idempotency:\n      key: { maxLength: 51, derive: [body] }\n');
    expect(policyOf(text).key.maxLength).toBe(51);
  });
});

describe('a full example config', () => {
  it('parses and resolves completely, its derived-key route included', () => {
    const config = parse(SPEC_EXAMPLE, {
      ADMIN_TOKEN: 'secret',
      DATABASE_URL: 'postgres://proxy:hunter2@db:5432/idem',
    });
    expect(config.routes.map((r) => [r.name, r.idempotency?.scope ?? null])).toEqual([
      ['refunds', 'refunds'],
      ['emails', 'emails'],
      ['everything-else', null],
    ]);
    expect(config.admin.token).toBe('secret');
    const emails = config.routes[1]!;
    expect(emails.upstream.basePath).toBe('/api');
    expect(emails.stripPrefix).toBe('/mail');
    expect(emails.idempotency!.key).toMatchObject({
      required: false,
      derive: [{ kind: 'body' }],
      windowMs: 600_000,
    });
    expect(emails.idempotency!.fingerprint.ignore).toEqual([['sent_at']]);
    expect(emails.idempotency!.fingerprint.parts).toHaveLength(4);
    expect(emails.idempotency!.enforce).toBe(true);
    expect(config.routes[0]!.idempotency!.ttlMs).toBe(72 * 3_600_000);
    expect(config.routes[0]!.idempotency!.key.derive).toBeNull();

    const text = describeConfig(config);
    expect(text).toContain('store: postgres://proxy:***@db:5432/idem');
    expect(text).not.toContain('hunter2');
    expect(text).not.toContain('secret');
    expect(text).toContain('2. emails: POST host mail.internal /mail/emails → mailer /api/emails');
    expect(text).toContain('fingerprint: method, path, query, body; ignoring body.sent_at');
    expect(text).toContain(
      'ttl 3d, lockTimeout 1m, unknownOutcome fail, onConcurrent reject (waitTimeout 10s)',
    );
    expect(text).toContain('stores: 2xx, 3xx, 4xx, 5xx except 408, 425, 429, 503');
    expect(text).toContain('3. everything-else: any method /** → payments /**\n     pass-through');
  });
});

describe('describeConfig', () => {
  it('names the embedded PostgreSQL when there is no database URL', () => {
    const text = describeConfig(parse(routeYaml('    match: { path: /** }\n')));
    expect(text).toContain(`store: embedded PostgreSQL at ${path.resolve('.data/postgres')}`);
    expect(text).toContain('admin: http://127.0.0.1:9090, /keys off (no admin.token)');
  });

  it('masks passwords in URL and keyword connection strings', () => {
    expect(maskPassword('postgres://u:p%40ss@h/db')).toBe('postgres://u:***@h/db');
    expect(maskPassword('postgres://h/db?password=x&sslmode=require')).toBe(
      'postgres://h/db?password=***&sslmode=require',
    );
    expect(maskPassword('host=h password=x dbname=d')).toBe('host=h password=*** dbname=d');
  });
});

describe('store.outbox.spool', () => {
  const spoolOf = (outbox: string, env: NodeJS.ProcessEnv = {}): string | undefined =>
    parse(routeYaml('    idempotency: {}\n', `store: { outbox: ${outbox} }\n`), env).store.outbox
      .spool;

  it('is a directory resolved against the working directory', () => {
    expect(spoolOf('{ spool: var/spool }')).toBe(path.resolve(process.cwd(), 'var/spool'));
    expect(spoolOf('{ spool: /srv/spool }')).toBe('/srv/spool');
  });

  it('is off when set to false, also from the environment', () => {
    expect(spoolOf('{ spool: false }')).toBeUndefined();
    expect(spoolOf('{ spool: "${SPOOL}" }', { SPOOL: 'false' })).toBeUndefined();
  });

  it('is the embedded PostgreSQL’s beside its data directory when unset, and off on a store URL', () => {
    expect(spoolOf('{}')).toBe(path.resolve(process.cwd(), '.data/postgres-spool'));
    expect(spoolOf('{}', { DATABASE_URL: 'postgres://db/x' })).toBeUndefined();
    expect(spoolOf('{ spool: /srv/spool }', { DATABASE_URL: 'postgres://db/x' })).toBe(
      '/srv/spool',
    );
  });

  it('refuses what is neither a directory nor false, and a spoolMaxBytes of nothing', () => {
    const issues = issuesOf(
      routeYaml('    idempotency: {}\n', 'store: { outbox: { spool: 3, spoolMaxBytes: 0b } }\n'),
    );
    expect(issues.map((issue) => [issue.path, issue.message])).toEqual([
      ['store.outbox.spool', expect.stringContaining('expected a directory, or false')],
      ['store.outbox.spoolMaxBytes', expect.stringContaining('greater than 0b')],
    ]);
  });
});
