// Security regression (src/http/README.md): the headers that could make the upstream run something
// other than what the proxy protected — method overrides, Connection naming a header the route
// relies on, tenant spellings, Transfer-Encoding, client-sent X-Forwarded-*/Forwarded, replayed
// auth headers and Date, duplicate JSON keys. Each test asserts what the client got and what the
// upstream received. Raw sockets, so every header line goes out exactly as written.
import { awaitCondition, expectProblem, withLogLine } from '../support/edge-expect';
import {
  type HeaderLines,
  rawGet,
  rawPostJson,
  rawRequest,
  type RawResponse,
} from '../support/edge-raw';
import { freshKey } from '../support/edge-refunds';
import { startProxy, type TestProxy } from '../support/proxy';
import { startUpstream, type TestUpstream } from '../support/upstream';

const OLD_DATE = 'Mon, 01 Jan 2001 00:00:00 GMT';
const CLIENT_FORWARDED: HeaderLines = [
  ['X-Forwarded-Host', 'evil.example'],
  ['X-Forwarded-Proto', 'https'],
  ['X-Forwarded-For', '1.2.3.4'],
  ['Forwarded', 'for=1.2.3.4;host=evil.example;proto=https'],
];
const OVERRIDES: HeaderLines = [
  ['X-HTTP-Method-Override', 'DELETE'],
  ['X-HTTP-Method', 'GET'],
  ['X-Method-Override', 'PUT'],
];

let upstream: TestUpstream;
/** trustedProxies lists addresses, none of them the test's 127.0.0.1. */
let proxy: TestProxy;
/** trustedProxies covers 127.0.0.1 (by a CIDR). */
let trusting: TestProxy;
/** No replay cache: every replay is read from PostgreSQL. */
let uncached: TestProxy;

const routesYaml = (trustedProxies: string, replayCache = '32mb'): string => `
store: { table: "\${TEST_TABLE}", replayCache: ${replayCache} }
trustedProxies: ${trustedProxies}
upstreams: { api: { url: ${upstream.url} } }
routes:
  - name: refunds
    match: { method: POST, path: /refunds }
    upstream: api
    idempotency: { tenant: [header:authorization] }
  - name: override
    match: { method: POST, path: /override }
    upstream: api
    methodOverride: true
    idempotency: {}
  - name: derived
    match: { method: POST, path: /derived }
    upstream: api
    idempotency: { key: { required: false, derive: [header:x-run-id] } }
  - name: signed
    match: { method: POST, path: /signed }
    upstream: api
    idempotency: { fingerprint: { parts: [method, path, body, header:x-signature] } }
  - name: gated
    match: { method: POST, path: /gated }
    upstream: api
    idempotency: { tenant: [header:authorization] }
  - name: body-free
    match: { method: POST, path: /body-free }
    upstream: api
    idempotency: { fingerprint: { parts: [method, path] } }
  - name: body-derived
    match: { method: POST, path: /body-derived }
    upstream: api
    idempotency:
      key: { required: false, derive: [body.order] }
      fingerprint: { parts: [method, path] }
  - name: body-field
    match: { method: POST, path: /body-field }
    upstream: api
    idempotency: { fingerprint: { parts: [method, path, body.amount] } }
  - name: dated
    match: { method: POST, path: /dated }
    upstream: api
    idempotency: {}
  - name: session
    match: { method: POST, path: /session }
    upstream: api
    idempotency: { dropReplayHeaders: [X-Session-Token] }
  - name: everything-else
    match: { path: /** }
    upstream: api
`;

/** Answers to /gated wait until the test opens the gate. */
function closedGate(): { promise: Promise<void>; resolve: () => void } {
  let resolve = (): void => undefined;
  const promise = new Promise<void>((done) => (resolve = done));
  return { promise, resolve };
}
let gate = closedGate();

beforeAll(async () => {
  upstream = await startUpstream(async (req, res) => {
    const path = req.url.split('?')[0];
    if (path === '/gated') await gate.promise;
    const headers: Record<string, string> = { 'content-type': 'application/json', 'x-kept': 'yes' };
    if (path === '/dated') {
      Object.assign(headers, {
        date: OLD_DATE,
        'www-authenticate': 'Bearer realm="edge"',
        'authentication-info': 'nextnonce="abc"',
        'proxy-authentication-info': 'nextnonce="def"',
      });
    }
    if (path === '/session') {
      Object.assign(headers, {
        'x-session-token': 'sess-1',
        'www-authenticate': 'Bearer realm="edge"',
      });
    }
    res.writeHead(req.method === 'POST' ? 201 : 200, headers);
    res.end(JSON.stringify({ n: upstream.received.length, method: req.method, url: req.url }));
  });
  proxy = await startProxy({ yaml: routesYaml('["10.0.0.0/8", "::1"]') });
  trusting = await startProxy({ yaml: routesYaml('["10.0.0.0/8", "127.0.0.0/8", "::1"]') });
  uncached = await startProxy({ yaml: routesYaml('[]', '0b') });
});

afterAll(async () => {
  gate.resolve();
  await proxy?.close();
  await trusting?.close();
  await uncached?.close();
  await upstream?.close();
});

beforeEach(() => {
  upstream.received.length = 0;
});

/** A raw POST of a JSON body (`{"amount":1000}` unless given). */
function post(
  target: string,
  headers: HeaderLines,
  body = '{"amount":1000}',
  via: TestProxy = proxy,
): Promise<RawResponse> {
  return rawPostJson(via.port, target, headers, body);
}

function get(target: string, headers: HeaderLines, via: TestProxy = proxy): Promise<RawResponse> {
  return rawGet(via.port, target, headers);
}

const OVERRIDE_NAMES = OVERRIDES.map(([name]) => name.toLowerCase());
const overridesSeen = (index = 0): string[] =>
  OVERRIDE_NAMES.filter((name) => upstream.received[index]!.headers[name] !== undefined);

describe('method override headers', () => {
  test('are removed before forwarding on a protected route without methodOverride', async () => {
    const res = await post('/refunds', [['Idempotency-Key', freshKey('mo')], ...OVERRIDES]);
    expect(res.status).toBe(201);
    expect(upstream.received.map((req) => req.method)).toEqual(['POST']);
    expect(overridesSeen()).toEqual([]);
  });

  test('are removed before forwarding on a pass-through route, even naming an unknown method', async () => {
    const res = await get('/things', [...OVERRIDES, ['X-HTTP-Method-Override', 'FROB']]);
    expect(res.status).toBe(200);
    expect(upstream.received.map((req) => req.method)).toEqual(['GET']);
    expect(overridesSeen()).toEqual([]);
  });

  test('do not make a GET on a route without methodOverride protected: it passes through, stripped', async () => {
    const { res, line } = await withLogLine(proxy, () =>
      get('/refunds', [['X-HTTP-Method-Override', 'POST']]),
    );
    expect(res.status).toBe(200);
    expect(line).toMatchObject({ outcome: 'passthrough' });
    expect(upstream.received.map((req) => `${req.method} ${req.url}`)).toEqual(['GET /refunds']);
    expect(overridesSeen()).toEqual([]);
  });

  test.each(['X-HTTP-Method-Override', 'X-HTTP-Method', 'X-Method-Override'])(
    'on a methodOverride route, %s: POST on a GET routes and protects it as a POST',
    async (name) => {
      const missing = await get('/override', [[name, 'POST']]);
      expectProblem(missing, 400, 'IDEMPOTENCY_KEY_MISSING');
      expect(upstream.received).toHaveLength(0);
      const key = freshKey('override');
      const { res, line } = await withLogLine(proxy, () =>
        get('/override', [
          [name, 'POST'],
          ['Idempotency-Key', key],
        ]),
      );
      expect(res.status).toBe(200);
      expect(line).toMatchObject({ route: 'override', outcome: 'executed' });
      // The upstream gets the request as sent: it applies the override itself.
      expect(upstream.received.map((req) => `${req.method} ${req.url}`)).toEqual(['GET /override']);
      expect(upstream.received[0]!.headers[name.toLowerCase()]).toBe('POST');
      expect(upstream.received[0]!.headers['idempotency-key']).toBe(key);
      const again = await get('/override', [
        [name, 'POST'],
        ['Idempotency-Key', key],
      ]);
      expect(again.headers['idempotent-replayed']).toBe('true');
      expect(upstream.received).toHaveLength(1);
    },
  );

  test('on a methodOverride route, several override headers that agree are one override', async () => {
    const key = freshKey('override-agree');
    const res = await get('/override', [
      ['X-HTTP-Method-Override', 'POST'],
      ['X-HTTP-Method', 'POST'],
      ['Idempotency-Key', key],
    ]);
    expect(res.status).toBe(200);
    expect(upstream.received).toHaveLength(1);
  });

  test.each<[string, HeaderLines]>([
    ['an unknown method', [['X-HTTP-Method-Override', 'FROB']]],
    ['a list', [['X-HTTP-Method-Override', 'POST, DELETE']]],
    [
      'two headers that disagree',
      [
        ['X-HTTP-Method-Override', 'POST'],
        ['X-HTTP-Method', 'DELETE'],
      ],
    ],
    [
      'one header twice, disagreeing',
      [
        ['X-Method-Override', 'POST'],
        ['X-Method-Override', 'PUT'],
      ],
    ],
  ])('on a methodOverride route, %s is a 400 METHOD_OVERRIDE_INVALID', async (_name, headers) => {
    const res = await post('/override', [
      ['Idempotency-Key', freshKey('override-bad')],
      ...headers,
    ]);
    expectProblem(res, 400, 'METHOD_OVERRIDE_INVALID');
    expect(upstream.received).toHaveLength(0);
  });
  // A POST that the proxy routes by its override (GET, not protected here) falls through to the
  // pass-through route, which removes the override: the upstream then runs a plain POST /override,
  // the protected endpoint, with no key. Either keep the override it was routed by, or refuse it.
  test.each(['GET', 'PATCH'])(
    'on a methodOverride route, a POST overridden to %s never reaches the upstream as a plain POST',
    async (override) => {
      const res = await post('/override', [['X-HTTP-Method-Override', override]]);
      const plainPosts = upstream.received.filter(
        (req) => req.method === 'POST' && req.headers['x-http-method-override'] === undefined,
      );
      expect({ status: res.status, plainPosts: plainPosts.map((req) => req.url) }).toEqual({
        status: res.status,
        plainPosts: [],
      });
    },
  );

  // The route is routed and protected by the override header; dropped as hop-by-hop, the upstream
  // runs a GET that the proxy stores as the POST's answer.
  test('on a methodOverride route, Connection naming the override header is a 400 CONNECTION_HEADER_CONFLICT', async () => {
    const res = await get('/override', [
      ['X-HTTP-Method-Override', 'POST'],
      ['Idempotency-Key', freshKey('override-conn')],
      ['Connection', 'x-http-method-override'],
    ]);
    expectProblem(res, 400, 'CONNECTION_HEADER_CONFLICT');
    expect(upstream.received).toHaveLength(0);
  });
});

describe('a Connection header', () => {
  test.each<[string, string, HeaderLines]>([
    ['the tenant header', '/refunds', [['Connection', 'authorization']]],
    ['the key header', '/refunds', [['Connection', 'Idempotency-Key']]],
    ['the key header among others', '/refunds', [['Connection', 'keep-alive, idempotency-key']]],
    [
      'the key header on a second line',
      '/refunds',
      [
        ['Connection', 'keep-alive'],
        ['Connection', 'IDEMPOTENCY-KEY'],
      ],
    ],
    ['a fingerprinted header', '/signed', [['Connection', 'x-signature']]],
  ])(
    'naming %s of a protected route is a 400 CONNECTION_HEADER_CONFLICT that claims nothing',
    async (_name, target, connection) => {
      const key = freshKey('conn');
      const headers: HeaderLines = [
        ['Authorization', 'Bearer conn'],
        ['X-Signature', 'sig-1'],
        ['Idempotency-Key', key],
      ];
      const res = await post(target, [...headers, ...connection]);
      expectProblem(res, 400, 'CONNECTION_HEADER_CONFLICT');
      expect(upstream.received).toHaveLength(0);
      const then = await post(target, [...headers, ['Connection', 'close']]);
      expect(then.status).toBe(201);
      expect(then.headers['idempotent-replayed']).toBeUndefined();
      expect(upstream.received).toHaveLength(1);
    },
  );

  test('naming the header a key is derived from is a 400 CONNECTION_HEADER_CONFLICT', async () => {
    const runId = freshKey('run');
    const res = await post('/derived', [
      ['X-Run-Id', runId],
      ['Connection', 'X-Run-Id'],
    ]);
    expectProblem(res, 400, 'CONNECTION_HEADER_CONFLICT');
    expect(upstream.received).toHaveLength(0);
    const then = await post('/derived', [
      ['X-Run-Id', runId],
      ['Connection', 'close'],
    ]);
    expect(then.status).toBe(201);
    expect(upstream.received).toHaveLength(1);
  });

  test.each(['host', 'Content-Length', 'transfer-encoding', 'close, host'])(
    'naming %s is a 400 CONNECTION_HEADER_CONFLICT on pass-through and protected routes',
    async (named) => {
      expectProblem(
        await get('/things', [['Connection', named]]),
        400,
        'CONNECTION_HEADER_CONFLICT',
      );
      const protectedRes = await post('/refunds', [
        ['Authorization', 'Bearer conn'],
        ['Idempotency-Key', freshKey('conn-framing')],
        ['Connection', named],
      ]);
      expectProblem(protectedRes, 400, 'CONNECTION_HEADER_CONFLICT');
      expect(upstream.received).toHaveLength(0);
    },
  );

  test('naming an unrelated header is fine, and that header is not forwarded', async () => {
    const key = freshKey('conn-unrelated');
    const res = await post('/refunds', [
      ['Authorization', 'Bearer conn'],
      ['Idempotency-Key', key],
      ['X-Trace', 't-1'],
      ['Connection', 'x-trace, close'],
    ]);
    expect(res.status).toBe(201);
    const passed = await get('/things', [
      ['X-Trace', 't-2'],
      ['Connection', 'X-Trace, close'],
    ]);
    expect(passed.status).toBe(200);
    expect(upstream.received.map((req) => [req.url, req.headers['x-trace']])).toEqual([
      ['/refunds', undefined],
      ['/things', undefined],
    ]);
    expect(upstream.received[0]!.headers['idempotency-key']).toBe(key);
  });
});

describe('the tenant from Authorization', () => {
  test('compares the scheme in any case and ignores extra spaces, but not the credentials', async () => {
    const key = freshKey('tenant');
    const as = (authorization: string) =>
      post('/refunds', [
        ['Authorization', authorization],
        ['Idempotency-Key', key],
      ]);
    const first = await as('Bearer A');
    expect(first.status).toBe(201);
    for (const same of ['bearer A', 'BEARER   A', 'Bearer  A', 'bEaReR A', 'Bearer \t A']) {
      const res = await as(same);
      expect({ same, replayed: res.headers['idempotent-replayed'] }).toEqual({
        same,
        replayed: 'true',
      });
      expect(res.text()).toBe(first.text());
    }
    const other = await as('Bearer a');
    expect(other.status).toBe(201);
    expect(other.headers['idempotent-replayed']).toBeUndefined();
    expect((await as('bearer   a')).headers['idempotent-replayed']).toBe('true');
    expect(upstream.received.map((req) => req.headers.authorization)).toEqual([
      'Bearer A',
      'Bearer a',
    ]);
  });
  test('while a request is in flight, its repeats in other spellings are refused and another tenant runs', async () => {
    gate = closedGate();
    const key = freshKey('in-flight');
    const as = (target: string, authorization: string) =>
      post(target, [
        ['Authorization', authorization],
        ['Idempotency-Key', key],
      ]);
    const first = as('/gated', 'Bearer A');
    await awaitCondition(() => upstream.received.length === 1, 'the first request upstream');
    for (const [target, authorization] of [
      ['/gated', 'bearer   A'],
      ['//gated', 'BEARER A'],
      ['/x/../gated', 'Bearer A'],
    ]) {
      expectProblem(await as(target!, authorization!), 409, 'IDEMPOTENCY_KEY_IN_FLIGHT');
    }
    const repeatLenient = await as('/GATED/', 'Bearer A');
    expect([409, 422]).toContain(repeatLenient.status);
    const otherTenant = as('/gated', 'Bearer a');
    await awaitCondition(
      () => upstream.received.length === 2,
      "the other tenant's request upstream",
    );
    gate.resolve();
    expect((await first).status).toBe(201);
    expect((await otherTenant).status).toBe(201);
    expect(upstream.received.map((req) => req.headers.authorization)).toEqual([
      'Bearer A',
      'Bearer a',
    ]);
  });
});

describe('Transfer-Encoding on a pass-through route', () => {
  const chunked = (...parts: string[]): string =>
    parts.map((p) => `${Buffer.byteLength(p).toString(16)}\r\n${p}\r\n`).join('') + '0\r\n\r\n';
  const sendChunked = (coding: string): Promise<RawResponse> =>
    rawRequest(proxy.port, {
      target: '/things',
      headers: [
        ['Content-Type', 'text/plain'],
        ['Transfer-Encoding', coding],
        ['Connection', 'close'],
      ],
      body: chunked('hello ', 'world'),
      framed: true,
    });

  test('a chunked body is forwarded chunked, with exactly "transfer-encoding: chunked"', async () => {
    const res = await sendChunked('chunked');
    expect(res.status).toBe(201);
    expect(upstream.received).toHaveLength(1);
    const seen = upstream.received[0]!;
    expect(seen.headers['transfer-encoding']).toBe('chunked');
    expect(seen.headers['content-length']).toBeUndefined();
    expect(seen.body.toString()).toBe('hello world');
  });

  test('"identity, chunked" is forwarded as "chunked", not as sent', async () => {
    const res = await sendChunked('identity, chunked');
    expect(res.status).toBe(201);
    expect(upstream.received.map((req) => req.headers['transfer-encoding'])).toEqual(['chunked']);
    expect(upstream.received[0]!.body.toString()).toBe('hello world');
  });

  test.each(['gzip, chunked', 'deflate, chunked', 'br, chunked', 'x-custom, chunked'])(
    '"%s" is a 501 TRANSFER_ENCODING_UNSUPPORTED, never forwarded',
    async (coding) => {
      expectProblem(await sendChunked(coding), 501, 'TRANSFER_ENCODING_UNSUPPORTED');
      expect(upstream.received).toHaveLength(0);
    },
  );
});

describe('X-Forwarded-* and Forwarded', () => {
  const forwardingSeen = (index: number) => {
    const seen = upstream.received[index]!.headers;
    return {
      host: seen['x-forwarded-host'],
      proto: seen['x-forwarded-proto'],
      for: seen['x-forwarded-for'],
      forwarded: seen.forwarded,
    };
  };
  const expectOwnForwarding = (via: TestProxy, index: number) =>
    expect(forwardingSeen(index)).toEqual({
      host: `127.0.0.1:${via.port}`,
      proto: 'http',
      for: '1.2.3.4, 127.0.0.1',
      forwarded: undefined,
    });

  test('a client-sent X-Forwarded-Host/-Proto and Forwarded are replaced on pass-through and protected routes', async () => {
    expect((await get('/things', CLIENT_FORWARDED)).status).toBe(200);
    const key = freshKey('xf');
    const protectedRes = await post('/refunds', [
      ['Authorization', 'Bearer xf'],
      ['Idempotency-Key', key],
      ...CLIENT_FORWARDED,
    ]);
    expect(protectedRes.status).toBe(201);
    expect(upstream.received).toHaveLength(2);
    expectOwnForwarding(proxy, 0);
    expectOwnForwarding(proxy, 1);
  });

  test('the proxy adds its own when the client sends none', async () => {
    expect((await get('/things', [])).status).toBe(200);
    const seen = upstream.received[0]!.headers;
    expect([seen['x-forwarded-host'], seen['x-forwarded-proto'], seen['x-forwarded-for']]).toEqual([
      `127.0.0.1:${proxy.port}`,
      'http',
      '127.0.0.1',
    ]);
  });

  test('from a peer in trustedProxies, the client-sent values are kept and X-Forwarded-For appended to', async () => {
    expect((await get('/things', CLIENT_FORWARDED, trusting)).status).toBe(200);
    const protectedRes = await post(
      '/refunds',
      [
        ['Authorization', 'Bearer xf'],
        ['Idempotency-Key', freshKey('xf-trusted')],
        ...CLIENT_FORWARDED,
      ],
      undefined,
      trusting,
    );
    expect(protectedRes.status).toBe(201);
    expect(upstream.received).toHaveLength(2);
    for (const index of [0, 1]) {
      expect(forwardingSeen(index)).toEqual({
        host: 'evil.example',
        proto: 'https',
        for: '1.2.3.4, 127.0.0.1',
        forwarded: 'for=1.2.3.4;host=evil.example;proto=https',
      });
    }
  });
});

describe.each([
  ['from the replay cache', () => proxy],
  ['from PostgreSQL', () => uncached],
])('a replay %s', (_name, via) => {
  test('carries a current Date, not the stored one, and leaves out the default dropReplayHeaders', async () => {
    const key = freshKey('dated');
    const first = await post('/dated', [['Idempotency-Key', key]], undefined, via());
    expect(first.status).toBe(201);
    expect(first.headers).toMatchObject({
      'www-authenticate': 'Bearer realm="edge"',
      'authentication-info': 'nextnonce="abc"',
      'proxy-authentication-info': 'nextnonce="def"',
      'x-kept': 'yes',
    });
    for (let i = 0; i < 2; i++) {
      const replay = await post('/dated', [['Idempotency-Key', key]], undefined, via());
      expect(replay.headers['idempotent-replayed']).toBe('true');
      expect(replay.text()).toBe(first.text());
      const date = replay.headers.date as string | undefined;
      expect(date).toBeDefined();
      expect(date).not.toBe(OLD_DATE);
      expect(new Date(date!).getUTCFullYear()).toBeGreaterThan(2001);
      expect(replay.headers['www-authenticate']).toBeUndefined();
      expect(replay.headers['authentication-info']).toBeUndefined();
      expect(replay.headers['proxy-authentication-info']).toBeUndefined();
      expect(replay.headers['x-kept']).toBe('yes');
    }
    expect(upstream.received).toHaveLength(1);
  });

  test("leaves out a route's own dropReplayHeaders, which replace the default list", async () => {
    const key = freshKey('session');
    const first = await post('/session', [['Idempotency-Key', key]], undefined, via());
    expect(first.headers).toMatchObject({ 'x-session-token': 'sess-1', 'x-kept': 'yes' });
    const replay = await post('/session', [['Idempotency-Key', key]], undefined, via());
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(replay.headers['x-session-token']).toBeUndefined();
    expect(replay.headers['www-authenticate']).toBe('Bearer realm="edge"');
    expect(replay.headers['x-kept']).toBe('yes');
    expect(upstream.received).toHaveLength(1);
  });
});

describe('duplicate keys in a fingerprinted JSON body', () => {
  test.each([
    '{"amount":1000,"amount":1}',
    '{"amount":1000,"amount":1000}',
    '{"a":{"b":1,"b":2}}',
    '{"items":[{"id":1},{"id":2,"id":3}]}',
    '{ "amount" : 1000 , "amount" : 1 }',
    '{"amount":1000,"\\u0061mount":1}',
  ])('%s is a 400 JSON_DUPLICATE_KEY that claims nothing', async (body) => {
    const key = freshKey('dup');
    const headers: HeaderLines = [
      ['Authorization', 'Bearer dup'],
      ['Idempotency-Key', key],
    ];
    expectProblem(await post('/refunds', headers, body), 400, 'JSON_DUPLICATE_KEY');
    expect(upstream.received).toHaveLength(0);
    const then = await post('/refunds', headers, '{"amount":1000}');
    expect(then.status).toBe(201);
    expect(then.headers['idempotent-replayed']).toBeUndefined();
    expect(upstream.received.map((req) => req.body.toString())).toEqual(['{"amount":1000}']);
  });

  test.each([
    '{"note":"\\"a\\":1,\\"a\\":2"}',
    '{"a":1,"b":{"a":2}}',
    '[{"id":1},{"id":2}]',
    '{"a":[{"b":1},{"b":2}]}',
  ])('%s has no duplicate key and is forwarded', async (body) => {
    const res = await post(
      '/refunds',
      [
        ['Authorization', 'Bearer dup'],
        ['Idempotency-Key', freshKey('no-dup')],
      ],
      body,
    );
    expect(res.status).toBe(201);
    expect(upstream.received.map((req) => req.body.toString())).toEqual([body]);
  });

  test('are rejected in a large body (one the proxy may look up by its bytes first), before and after a replay', async () => {
    const pad = 'x'.repeat(40 * 1024);
    const valid = `{"pad":"${pad}","amount":1000}`;
    const duplicated = `{"pad":"${pad}","amount":1000,"amount":1}`;
    const headers: HeaderLines = [
      ['Authorization', 'Bearer dup'],
      ['Idempotency-Key', freshKey('dup-large')],
    ];
    expectProblem(await post('/refunds', headers, duplicated), 400, 'JSON_DUPLICATE_KEY');
    const first = await post('/refunds', headers, valid);
    expect(first.status).toBe(201);
    const replay = await post('/refunds', headers, valid);
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expectProblem(await post('/refunds', headers, duplicated), 400, 'JSON_DUPLICATE_KEY');
    expect(upstream.received).toHaveLength(1);
  });

  test('are rejected in a body sent as another JSON media type (+json)', async () => {
    const res = await rawRequest(proxy.port, {
      target: '/refunds',
      headers: [
        ['Content-Type', 'application/merge-patch+json; charset=utf-8'],
        ['Authorization', 'Bearer dup'],
        ['Idempotency-Key', freshKey('dup-plus-json')],
      ],
      body: '{"amount":1000,"amount":1}',
    });
    expectProblem(res, 400, 'JSON_DUPLICATE_KEY');
    expect(upstream.received).toHaveLength(0);
  });

  test.each([
    ['a key is derived from a body field', '/body-derived', [], '{"order":7,"order":8}'],
    [
      'the fingerprint reads a body field',
      '/body-field',
      [['Idempotency-Key', 'body-field-dup']],
      '{"amount":1000,"amount":1}',
    ],
  ] as [string, string, HeaderLines, string][])(
    'are rejected where %s, though the fingerprint leaves the whole body out',
    async (_name, target, headers, body) => {
      expectProblem(await post(target, headers, body), 400, 'JSON_DUPLICATE_KEY');
      expect(upstream.received).toHaveLength(0);
    },
  );

  test('are not rejected on a route whose fingerprint and key leave the body out', async () => {
    const body = '{"amount":1000,"amount":1}';
    const res = await post('/body-free', [['Idempotency-Key', freshKey('body-free')]], body);
    expect(res.status).toBe(201);
    expect(upstream.received.map((req) => req.body.toString())).toEqual([body]);
  });
});
