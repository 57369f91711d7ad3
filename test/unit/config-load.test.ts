// YAML → interpolation → schema: every problem reported with its path, line and column.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { settingName } from '../../src/config/env-sources';
import { interpolate } from '../../src/compiler/interpolate';
import { loadConfigFile, parseConfigText } from '../../src/compiler/load';
import { StartupError } from '../../src/startup-error';
import { ConfigError, type ConfigIssue } from '../../src/errors';

const ROUTES = `upstreams:
  app: { url: http://127.0.0.1:4000 }
routes:
  - name: orders
    match: { method: POST, path: /orders }
    upstream: app
    idempotency: {}
`;

function issuesOf(text: string, env: NodeJS.ProcessEnv = {}): ConfigIssue[] {
  try {
    parseConfigText(text, 'proxy.yaml', env);
  } catch (error) {
    if (error instanceof ConfigError) return [...error.issues];
    throw error;
  }
  throw new Error('expected a ConfigError');
}

describe('interpolate', () => {
  it('substitutes a set variable and marks the value as coming from the environment', () => {
    expect(interpolate('a-${X}-b', { X: '1' })).toEqual({
      value: 'a-1-b',
      fromEnv: true,
      variables: ['X'],
      problems: [],
    });
  });

  it('uses the default when the variable is unset or empty', () => {
    expect(interpolate('${X:-8080}', {}).value).toBe('8080');
    expect(interpolate('${X:-8080}', { X: '' }).value).toBe('8080');
    expect(interpolate('${X:-}', {}).value).toBe('');
    expect(interpolate('${X:-8080}', { X: '9' }).value).toBe('9');
  });

  it('allows a set but empty variable without a default', () => {
    expect(interpolate('[${X}]', { X: '' })).toEqual({
      value: '[]',
      fromEnv: true,
      variables: ['X'],
      problems: [],
    });
  });

  it('reports an unset variable by name', () => {
    expect(interpolate('${ADMIN_TOKEN}', {}).problems).toEqual([
      'environment variable ADMIN_TOKEN is not set; set it, or give a default with ${ADMIN_TOKEN:-value}',
    ]);
  });

  it('turns $${ into a literal ${ without looking the name up', () => {
    expect(interpolate('$${X} and $5', { X: 'no' })).toEqual({
      value: '${X} and $5',
      fromEnv: false,
      variables: [],
      problems: [],
    });
  });

  it('does not expand references inside a substituted value', () => {
    expect(interpolate('${A}', { A: '${B}', B: 'leak' }).value).toBe('${B}');
  });

  it('reports malformed references', () => {
    expect(interpolate('${1X}', {}).problems).toEqual([
      'invalid reference "${1X}"; expected ${NAME} or ${NAME:-default} (write $${ for a literal "${")',
    ]);
    expect(interpolate('x${HOME', {}).problems).toEqual([
      'unclosed "${" in "x${HOME"; expected ${NAME} or ${NAME:-default} (write $${ for a literal "${")',
    ]);
  });
});

describe('interpolation in the config file', () => {
  it('turns numbers and booleans from the environment into numbers and booleans', () => {
    const text = `listen:\n  port: \${PORT:-8080}\nadmin: { port: "\${ADMIN_PORT}" }\n${ROUTES.replace(
      'idempotency: {}',
      'idempotency:\n      replaySetCookie: ${COOKIES}',
    )}`;
    const config = parseConfigText(text, 'proxy.yaml', { ADMIN_PORT: '9999', COOKIES: 'true' });
    expect(config.listen.port).toBe(8080);
    expect(config.admin.port).toBe(9999);
    expect(config.routes[0]!.idempotency!.replaySetCookie).toBe(true);
  });

  it('keeps an environment value holding YAML syntax as one plain string', () => {
    const injected = 'x\nlisten: { port: 1 }\n- [a, b]\nroutes: {}';
    const config = parseConfigText(`admin: { token: "\${TOKEN}" }\n${ROUTES}`, 'proxy.yaml', {
      TOKEN: injected,
    });
    expect(config.admin.token).toBe(injected);
    expect(config.listen.port).toBe(8080);
    expect(config.routes).toHaveLength(1);
  });

  it('keeps a literal ${ written as $${', () => {
    const config = parseConfigText(`admin:\n  token: "$\${NOT_A_VAR}"\n${ROUTES}`, 'p.yaml', {});
    expect(config.admin.token).toBe('${NOT_A_VAR}');
  });

  it('reports an unset variable at the value that uses it, once', () => {
    expect(issuesOf(`admin:\n  port: \${ADMIN_PORT}\n${ROUTES}`)).toEqual([
      {
        path: 'admin.port',
        line: 2,
        column: 9,
        message:
          'environment variable ADMIN_PORT is not set; set it, or give a default with ${ADMIN_PORT:-value}',
      },
    ]);
  });

  it('names the variable and the value it held when a value from the environment is invalid', () => {
    expect(
      issuesOf(`listen:\n  port: \${PROXY_PORT:-8080}\n${ROUTES}`, { PROXY_PORT: 'abc' }),
    ).toEqual([
      {
        path: 'listen.port',
        line: 2,
        column: 9,
        message: 'expected a port number from 0 to 65535, got "abc" from ${PROXY_PORT}',
      },
    ]);
  });

  it('masks the password of a URL from the environment', () => {
    const [url] = issuesOf(`store:\n  url: \${DB}\n${ROUTES}`, { DB: 'mysql://root:hunter2@db' });
    expect(url).toEqual({
      path: 'store.url',
      line: 2,
      column: 8,
      message:
        'expected a postgres:// URL, or empty for the embedded PostgreSQL, got "mysql://root:***@db" from ${DB}',
    });
  });

  it('tells which variables a setting was read from, for startup errors', () => {
    const config = parseConfigText(
      `listen:\n  port: \${PROXY_PORT:-8080}\n${ROUTES}`,
      'proxy.yaml',
      {},
    );
    expect(settingName(config, 'listen.port')).toBe('listen.port (PROXY_PORT)');
    expect(settingName(config, 'admin.port')).toBe('admin.port');
  });
});

describe('broken YAML', () => {
  it('reports a tab used as indentation at the parser location', () => {
    expect(issuesOf('listen:\n\tport: 8080\n')).toEqual([
      {
        path: '',
        line: 2,
        column: 1,
        message: 'invalid YAML: tabs are not allowed as indentation',
      },
    ]);
  });

  it('reports an unclosed bracket with a line and column', () => {
    const [issue, ...rest] = issuesOf('routes: [\n  { name: a }\nupstreams: {}\n');
    expect(rest).toEqual([]);
    expect(issue).toMatchObject({ path: '', line: 3, column: 1 });
    expect(issue!.message).toMatch(/^invalid YAML: .*\]/);
  });

  it('hints at quoting when ${VAR} is unquoted inside { }', () => {
    expect(issuesOf(`listen: { port: \${PORT} }\n${ROUTES}`)).toEqual([
      {
        path: '',
        line: 1,
        column: 18,
        message:
          'invalid YAML: unexpected flow-map-start at node end (inside { } or [ ], quote a value that uses ${...})',
      },
    ]);
  });

  it('rejects a duplicate key at the second occurrence', () => {
    expect(issuesOf(`listen: {}\n${ROUTES}listen: {}\n`)).toEqual([
      { path: '', line: 9, column: 1, message: 'invalid YAML: map keys must be unique' },
    ]);
  });

  it('rejects a file with two documents', () => {
    expect(issuesOf(`${ROUTES}---\n${ROUTES}`)[0]).toMatchObject({
      line: 8,
      message: 'invalid YAML: the file holds more than one document (a second "---"); expected one',
    });
  });
});

describe('unknown keys', () => {
  it('reports a top-level typo at the key, with a suggestion', () => {
    expect(issuesOf(`${ROUTES}listne: { port: 1 }\n`)).toEqual([
      {
        path: 'listne',
        line: 8,
        column: 1,
        message: 'unknown key "listne"; did you mean "listen"?',
      },
    ]);
  });

  it('reports a typo inside a route idempotency block at its own path and line', () => {
    const text = `${ROUTES.replace('idempotency: {}', 'idempotency:\n      ttl: 1h\n      ttll: 3h')}`;
    expect(issuesOf(text)).toEqual([
      {
        path: 'routes[0].idempotency.ttll',
        line: 9,
        column: 7,
        message: 'unknown key "ttll"; did you mean "ttl"?',
      },
    ]);
  });

  it('lists the accepted keys when nothing is close, one issue per unknown key', () => {
    expect(issuesOf(`listen: { host: 0.0.0.0, color: red, size: 3 }\n${ROUTES}`)).toEqual([
      {
        path: 'listen.color',
        line: 1,
        column: 26,
        message:
          'unknown key "color"; expected one of: host, port, maxRequestHeaders, maxBodyBytesInFlight, tls',
      },
      {
        path: 'listen.size',
        line: 1,
        column: 38,
        message:
          'unknown key "size"; expected one of: host, port, maxRequestHeaders, maxBodyBytesInFlight, tls',
      },
    ]);
  });

  it('reports a bad upstream name at the name itself', () => {
    expect(issuesOf(ROUTES.replace('  app: {', '  "my app": {'))).toEqual([
      {
        path: 'upstreams["my app"]',
        line: 2,
        column: 3,
        message:
          'expected an upstream name of letters, digits, ".", "_" or "-", starting with a letter or digit, got "my app"',
      },
    ]);
  });

  it('is not fooled by a __proto__ key', () => {
    expect(issuesOf(`__proto__: { listen: 1 }\n${ROUTES}`)).toEqual([
      expect.objectContaining({ path: '__proto__', line: 1, column: 1 }),
    ]);
  });
});

describe('field errors', () => {
  const withPolicy = (lines: string) => ROUTES.replace('idempotency: {}', `idempotency:\n${lines}`);

  it('explains a duration without a unit and shows what was written', () => {
    expect(issuesOf(withPolicy('      ttl: 30\n'))).toEqual([
      {
        path: 'routes[0].idempotency.ttl',
        line: 8,
        column: 12,
        message: 'expected a duration like "30s", "10m" or "24h", got 30',
      },
    ]);
  });

  it('explains a bad size', () => {
    expect(issuesOf(withPolicy('      maxRequestBytes: 10 MB\n'))).toEqual([
      {
        path: 'routes[0].idempotency.maxRequestBytes',
        line: 8,
        column: 24,
        message: 'expected a size like "512kb" or "8mb", got "10 MB"',
      },
    ]);
  });

  it('rejects a zero lockTimeout', () => {
    expect(issuesOf(withPolicy('      lockTimeout: 0s\n'))[0]?.message).toBe(
      'expected a duration greater than 0, got "0s"',
    );
  });

  it('reports a missing required key at the mapping that lacks it', () => {
    expect(issuesOf(ROUTES.replace('{ url: http://127.0.0.1:4000 }', '\n    timeout: 5s'))).toEqual(
      [
        {
          path: 'upstreams.app.url',
          line: 2,
          column: 3,
          message: 'missing required key "url" (expected an http:// or https:// URL)',
        },
      ],
    );
  });

  it('reports several problems at once, in file order, each at its own place', () => {
    const text = [
      'listen: { port: 70000 }', // 1
      'store: { table: "keys; drop table x" }', // 2
      'upstreams:', // 3
      '  app: { url: http://127.0.0.1:4000, timeout: soon }', // 4
      'routes:', // 5
      '  - name: orders', // 6
      '    match: { method: FETCH, path: orders }', // 7
      '    upstream: app', // 8
      '    idempotency: { unknownOutcome: maybe, tenant: [authorization] }', // 9
    ].join('\n');
    const issues = issuesOf(text);
    expect(issues).toEqual([
      {
        path: 'listen.port',
        line: 1,
        column: 17,
        message: 'expected a port number from 0 to 65535, got 70000',
      },
      {
        path: 'store.table',
        line: 2,
        column: 17,
        message:
          'expected a plain SQL identifier: lower-case letters, digits and "_", not starting with a digit, got "keys; drop table x"',
      },
      {
        path: 'upstreams.app.timeout',
        line: 4,
        column: 47,
        message: 'expected a duration like "30s", "10m" or "24h", got "soon"',
      },
      {
        path: 'routes[0].match.method',
        line: 7,
        column: 22,
        message:
          'expected an HTTP method (GET, HEAD, OPTIONS, POST, PUT, PATCH, DELETE) or a list of them, got "FETCH"',
      },
      {
        path: 'routes[0].match.path',
        line: 7,
        column: 35,
        message:
          'expected a path starting with "/": literal segments, ":param" segments, or a final "/**", got "orders"',
      },
      {
        path: 'routes[0].idempotency.unknownOutcome',
        line: 9,
        column: 36,
        message: 'expected fail or retry, got "maybe"',
      },
      {
        path: 'routes[0].idempotency.tenant[0]',
        line: 9,
        column: 52,
        message:
          'expected "jwt:<claim>" (a claim of the verified bearer token, like "jwt:sub") or "header:<name>", got "authorization"',
      },
    ]);
    expect(() => parseConfigText(text, 'config/proxy.yaml', {})).toThrow(
      'config/proxy.yaml:9:52 routes[0].idempotency.tenant[0]: expected "jwt:<claim>" (a claim of the verified bearer token, like "jwt:sub") or "header:<name>", got "authorization"',
    );
  });
});

describe('YAML features', () => {
  it('reports a bad entry of a method list at the entry', () => {
    expect(issuesOf(ROUTES.replace('method: POST', 'method: [POST, FETCH]'))).toEqual([
      {
        path: 'routes[0].match.method[1]',
        line: 5,
        column: 29,
        message:
          'expected an HTTP method (GET, HEAD, OPTIONS, POST, PUT, PATCH, DELETE), got "FETCH"',
      },
    ]);
  });

  it('lets anchors and aliases share settings between routes', () => {
    const text = `${ROUTES.replace('idempotency: {}', 'idempotency: &strict { ttl: 2h }')}  - name: payouts
    match: { path: /payouts }
    upstream: app
    idempotency: *strict
`;
    const config = parseConfigText(text, 'proxy.yaml', {});
    expect(config.routes.map((route) => route.idempotency?.ttlMs)).toEqual([7_200_000, 7_200_000]);
  });

  it('refuses an alias bomb instead of expanding it', () => {
    const levels = Array.from({ length: 7 }, (_, i) =>
      i === 0
        ? 'a0: &a0 [x, x, x, x, x, x, x, x, x, x]'
        : `a${i}: &a${i} [${Array(10)
            .fill(`*a${i - 1}`)
            .join(', ')}]`,
    );
    expect(issuesOf(`${levels.join('\n')}\n`)).toEqual([
      {
        path: '',
        line: 1,
        column: 1,
        message:
          'the document is too large or too deeply nested (limit: 100000 nodes, aliases expanded)',
      },
    ]);
  });
});

describe('files', () => {
  it('reports a missing file with how to point at the right one', () => {
    const missing = path.join(os.tmpdir(), 'no-such-dir', 'proxy.yaml');
    expect(() => loadConfigFile(missing, {})).toThrow(StartupError);
    expect(() => loadConfigFile(missing, {})).toThrow(
      `config file not found: ${missing}; pass --config FILE or set IDEMPOTENCY_PROXY_CONFIG (config/proxy.yaml in a clone is the example to start from)`,
    );
  });

  it('loads a file from disk and records its absolute path', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'config-load-'));
    const file = path.join(dir, 'proxy.yaml');
    fs.writeFileSync(file, ROUTES);
    try {
      expect(loadConfigFile(file, {}).file).toBe(file);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it.each([
    ['an empty file', ''],
    ['a file of comments', '# nothing yet\n'],
  ])('rejects %s: there are no routes', (_, text) => {
    expect(issuesOf(text)).toEqual([
      {
        path: '',
        line: undefined,
        column: undefined,
        message: 'the config file is empty; expected at least "upstreams" and "routes"',
      },
    ]);
  });

  it('requires at least one route', () => {
    expect(issuesOf('upstreams: {}\nroutes: []\n')).toEqual([
      { path: 'routes', line: 2, column: 9, message: 'expected at least one route' },
    ]);
  });

  it('rejects a document that is not a mapping', () => {
    expect(issuesOf('- a\n- b\n')[0]?.message).toBe(
      'expected a mapping of config sections (listen, shutdownGrace, workers, heapTarget, admin, store, upstreams, trustedProxies, auth, defaults, routes)',
    );
  });
});

describe('streams and onConcurrent: attach', () => {
  it('reports a media type with parameters, and a bad chunked flag, each at its place', () => {
    const text = ROUTES.replace(
      'idempotency: {}',
      'idempotency: { streams: { contentTypes: ["text/event-stream; charset=utf-8"], chunked: maybe } }',
    );
    expect(issuesOf(text)).toEqual([
      {
        path: 'routes[0].idempotency.streams.contentTypes[0]',
        line: 7,
        column: 46,
        message:
          'expected a media type like "text/event-stream" (no parameters), got "text/event-stream; charset=utf-8"',
      },
      {
        path: 'routes[0].idempotency.streams.chunked',
        line: 7,
        column: 92,
        message: 'expected true or false, got "maybe"',
      },
    ]);
  });

  it('names attach among the choices of onConcurrent', () => {
    const text = ROUTES.replace('idempotency: {}', 'idempotency: { onConcurrent: join }');
    expect(issuesOf(text)).toMatchObject([
      {
        path: 'routes[0].idempotency.onConcurrent',
        message: 'expected reject, wait or attach, got "join"',
      },
    ]);
    const attach = ROUTES.replace('idempotency: {}', 'idempotency: { onConcurrent: attach }');
    expect(parseConfigText(attach, 'proxy.yaml', {}).routes[0]!.idempotency!.onConcurrent).toBe(
      'attach',
    );
  });
});
