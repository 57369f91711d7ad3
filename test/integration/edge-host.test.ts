// Security regression (src/http/README.md, "Host"): a route matched by host is reached however the
// client spells that host (case, trailing dot, port, an absolute-form target), the authority of an
// absolute-form target wins over the Host header, and a request whose host cannot be decided — no
// Host on HTTP/1.1, several Host lines, a malformed value — is a 400 before any route is chosen.
// Raw sockets throughout: an HTTP client would add or fix the Host line itself.
import { expectProblem, withLogLine } from '../support/edge-expect';
import {
  type HeaderLines,
  rawGet,
  rawPostJson,
  type RawRequest,
  type RawResponse,
} from '../support/edge-raw';
import { freshKey } from '../support/edge-refunds';
import { startProxy, type TestProxy } from '../support/proxy';
import { startUpstream, type TestUpstream } from '../support/upstream';

let upstream: TestUpstream;
/** Has routes matched by host (mail.internal) before a catch-all. */
let hosted: TestProxy;
/** Has no route that matches by host. */
let hostless: TestProxy;

beforeAll(async () => {
  upstream = await startUpstream((req, res) => {
    res.writeHead(req.method === 'POST' ? 201 : 200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ url: req.url, forwardedHost: req.headers['x-forwarded-host'] }));
  });
  hosted = await startProxy({
    yaml: `
store: { table: "\${TEST_TABLE}" }
upstreams:
  api: { url: ${upstream.url} }
  mailer: { url: ${upstream.url}/api }
routes:
  - name: emails
    match: { method: POST, path: /emails, host: mail.internal }
    upstream: mailer
    idempotency: {}
  - name: mail
    match: { path: /**, host: mail.internal }
    upstream: mailer
  - name: everything-else
    match: { path: /** }
    upstream: api
`,
  });
  hostless = await startProxy({
    yaml: `
store: { table: "\${TEST_TABLE}" }
upstreams: { api: { url: ${upstream.url} } }
routes:
  - name: refunds
    match: { method: POST, path: /refunds }
    upstream: api
    idempotency: {}
  - name: everything-else
    match: { path: /** }
    upstream: api
`,
  });
});

afterAll(async () => {
  await hosted?.close();
  await hostless?.close();
  await upstream?.close();
});

beforeEach(() => {
  upstream.received.length = 0;
});

/** A POST with a JSON body; `key` adds an Idempotency-Key. */
function post(
  proxy: TestProxy,
  request: Pick<RawRequest, 'target' | 'host' | 'version' | 'headers'> & { key?: string },
): Promise<RawResponse> {
  const key: HeaderLines = request.key === undefined ? [] : [['Idempotency-Key', request.key]];
  return rawPostJson(
    proxy.port,
    request.target,
    [...key, ...(request.headers ?? [])],
    '{"to":"a@example.com"}',
    request,
  );
}

describe('a route matched by host', () => {
  test('is protected for its host: no key is a 400, a key runs once and then replays', async () => {
    expectProblem(
      await post(hosted, { target: '/emails', host: 'mail.internal' }),
      400,
      'IDEMPOTENCY_KEY_MISSING',
    );
    expect(upstream.received).toHaveLength(0);
    const key = freshKey('host');
    const first = await post(hosted, { target: '/emails', host: 'mail.internal', key });
    expect(first.status).toBe(201);
    expect(first.json()).toMatchObject({ url: '/api/emails' });
    const again = await post(hosted, { target: '/emails', host: 'mail.internal', key });
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(upstream.received).toHaveLength(1);
  });

  test.each([
    'MAIL.INTERNAL',
    'Mail.Internal',
    'mail.internal.',
    'MAIL.Internal.',
    'mail.internal:8080',
    'mail.internal.:80',
    'Mail.Internal.:65535',
  ])('is matched by the Host %s (case, trailing dot and port ignored)', async (host) => {
    expectProblem(await post(hosted, { target: '/emails', host }), 400, 'IDEMPOTENCY_KEY_MISSING');
    const key = freshKey('host-spelling');
    const { res, line } = await withLogLine(hosted, () =>
      post(hosted, { target: '/emails', host, key }),
    );
    expect(res.status).toBe(201);
    expect(line).toMatchObject({ route: 'emails', outcome: 'executed' });
    expect(upstream.received.map((req) => req.url)).toEqual(['/api/emails']);
  });

  test.each(['mail.internal.evil', 'xmail.internal', 'mail.internal..', 'mail'])(
    'is not matched by the Host %s',
    async (host) => {
      const { res, line } = await withLogLine(hosted, () =>
        post(hosted, { target: '/emails', host }),
      );
      if (res.status === 400) return expectProblem(res, 400, 'HOST_INVALID');
      expect(res.status).toBe(201);
      expect(line).toMatchObject({ route: 'everything-else', outcome: 'passthrough' });
      expect(upstream.received.map((req) => req.url)).toEqual(['/emails']);
    },
  );

  test('forwards X-Forwarded-Host as the host the client used: lower case, no trailing dot', async () => {
    const res = await rawGet(hosted.port, '/inbox', [], { host: 'Mail.Internal.:8080' });
    expect(res.status).toBe(200);
    expect(res.json()).toEqual({ url: '/api/inbox', forwardedHost: 'mail.internal:8080' });
  });
});

describe('an absolute-form request target', () => {
  test.each([
    'http://mail.internal/emails',
    'http://MAIL.Internal./emails',
    'http://mail.internal:8080/emails',
  ])(
    '%s reaches the host-matched protected route whatever the Host header says',
    async (target) => {
      expectProblem(await post(hosted, { target }), 400, 'IDEMPOTENCY_KEY_MISSING');
      expect(upstream.received).toHaveLength(0);
      const key = freshKey('absolute');
      const { res, line } = await withLogLine(hosted, () => post(hosted, { target, key }));
      expect(res.status).toBe(201);
      expect(line).toMatchObject({ route: 'emails', path: '/emails', outcome: 'executed' });
      expect(upstream.received.map((req) => req.url)).toEqual(['/api/emails']);
      // The same key in origin-form to the same host is the same request: a replay.
      const again = await post(hosted, { target: '/emails', host: 'mail.internal', key });
      expect(again.headers['idempotent-replayed']).toBe('true');
      expect(upstream.received).toHaveLength(1);
    },
  );

  test.each([
    'http://mail.internal//emails',
    'http://mail.internal/x/../emails',
    'http://mail.internal/%65mails/.',
  ])(
    '%s has its path made canonical like an origin-form one: the protected route, no key, 400',
    async (target) => {
      const { res, line } = await withLogLine(hosted, () => post(hosted, { target }));
      expectProblem(res, 400, 'IDEMPOTENCY_KEY_MISSING');
      expect(line).toMatchObject({ route: 'emails' });
      expect(upstream.received).toHaveLength(0);
    },
  );

  test.each([
    ['http://mail.internal/emails%2F', 'REQUEST_TARGET_INVALID'],
    ['http://mail.internal/emails\\', 'REQUEST_TARGET_INVALID'],
    ['http://mail.internal/%zz', 'REQUEST_TARGET_INVALID'],
    ['http://user@mail.internal/emails', 'HOST_INVALID'],
    ['http://mail.internal:x/emails', 'HOST_INVALID'],
    ['http:///emails', 'HOST_INVALID'],
  ])(
    '%s is refused as an origin-form target or a Host header would be: 400 %s',
    async (target, code) => {
      expectProblem(await post(hosted, { target, key: freshKey('absolute-bad') }), 400, code);
      expect(upstream.received).toHaveLength(0);
    },
  );

  test('wins over a Host header that names the protected host', async () => {
    const { res, line } = await withLogLine(hosted, () =>
      post(hosted, { target: `http://127.0.0.1:${hosted.port}/emails`, host: 'mail.internal' }),
    );
    expect(res.status).toBe(201);
    expect(line).toMatchObject({ route: 'everything-else', outcome: 'passthrough' });
    expect(upstream.received.map((req) => req.url)).toEqual(['/emails']);
  });

  test('is forwarded in origin-form, canonical, with its authority as X-Forwarded-Host', async () => {
    const res = await rawGet(hosted.port, 'http://MAIL.internal.:8080/x/../inbox?q=1');
    expect(res.status).toBe(200);
    expect(res.json()).toEqual({ url: '/api/inbox?q=1', forwardedHost: 'mail.internal:8080' });
  });
});

describe.each([
  ['with routes matched by host', () => hosted],
  ['without routes matched by host', () => hostless],
])('a proxy %s', (_name, proxyOf) => {
  test('answers 400 HOST_INVALID to an HTTP/1.1 request without Host', async () => {
    const key = freshKey('no-host');
    expectProblem(
      await post(proxyOf(), { target: '/emails', host: null, key }),
      400,
      'HOST_INVALID',
    );
    expectProblem(await rawGet(proxyOf().port, '/inbox', [], { host: null }), 400, 'HOST_INVALID');
    expect(upstream.received).toHaveLength(0);
  });

  test.each([
    ['mail.internal', 'mail.internal'],
    ['127.0.0.1', 'mail.internal'],
    ['mail.internal', '127.0.0.1'],
  ])('answers 400 HOST_INVALID to two Host lines (%s, %s)', async (first, second) => {
    const key = freshKey('two-hosts');
    const res = await post(proxyOf(), {
      target: '/emails',
      host: first,
      headers: [['Host', second]],
      key,
    });
    expectProblem(res, 400, 'HOST_INVALID');
    expect(upstream.received).toHaveLength(0);
  });

  test.each(['mail internal', 'mail.internal /x', 'mail.internal/x', 'user@mail.internal', '@'])(
    'answers 400 HOST_INVALID to the malformed Host %j',
    async (host) => {
      const res = await post(proxyOf(), { target: '/emails', host, key: freshKey('bad-host') });
      expectProblem(res, 400, 'HOST_INVALID');
      expect(upstream.received).toHaveLength(0);
    },
  );
});

describe('HTTP/1.0 without a Host line', () => {
  test('is a 400 HOST_INVALID when some route matches by host', async () => {
    const res = await post(hosted, { target: '/emails', host: null, version: '1.0' });
    expectProblem(res, 400, 'HOST_INVALID');
    const get = await rawGet(hosted.port, '/inbox', [], { host: null, version: '1.0' });
    expectProblem(get, 400, 'HOST_INVALID');
    expect(upstream.received).toHaveLength(0);
  });

  test('is served normally when no route matches by host: protected and pass-through', async () => {
    const key = freshKey('http10');
    const first = await post(hostless, { target: '/refunds', host: null, version: '1.0', key });
    expect(first.status).toBe(201);
    const again = await post(hostless, { target: '/refunds', host: null, version: '1.0', key });
    expect(again.headers['idempotent-replayed']).toBe('true');
    const get = await rawGet(hostless.port, '/inbox', [], { host: null, version: '1.0' });
    expect(get.status).toBe(200);
    expect(upstream.received.map((req) => `${req.method} ${req.url}`)).toEqual([
      'POST /refunds',
      'GET /inbox',
    ]);
  });

  test('with a Host line reaches the host-matched protected route', async () => {
    const key = freshKey('http10-host');
    const res = await post(hosted, {
      target: '/emails',
      host: 'Mail.Internal.',
      version: '1.0',
      key,
    });
    expect(res.status).toBe(201);
    expect(upstream.received.map((req) => req.url)).toEqual(['/api/emails']);
  });
});
