// TLS towards upstreams, on every path (protected, pass-through, websocket, MCP), against real Node
// https servers with certificates the test makes: a private CA that verifies; a wrong host name, an
// expired certificate, an unknown CA and a missing client certificate that do not — each a 502
// UPSTREAM_TLS_FAILED saying why, nothing reaching the upstream, and on a protected route the claim
// released so the retry forwards again.
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import net from 'node:net';
import type { TLSSocket } from 'node:tls';
import { send, type TestResponse } from '../support/http';
import { startProxy, type TestProxy } from '../support/proxy';
import { makeTestCertificates, pem, type CertFiles } from '../support/test-certificates';

const certs = makeTestCertificates();

interface TlsUpstream {
  readonly port: number;
  /** Requests that reached the handler: the path, and the client certificate's CN if any. */
  readonly received: { url: string; clientCn: string | undefined }[];
  close(): Promise<void>;
}

async function startTlsUpstream(
  cert: CertFiles,
  options: { requireClientCert?: boolean } = {},
): Promise<TlsUpstream> {
  const received: TlsUpstream['received'] = [];
  const server = https.createServer(
    {
      cert: pem(cert.cert),
      key: pem(cert.key),
      ...(options.requireClientCert
        ? { ca: pem(certs.ca.cert), requestCert: true, rejectUnauthorized: true }
        : {}),
    },
    (req, res) => {
      const peer = (req.socket as TLSSocket).getPeerCertificate();
      const cn = peer?.subject?.CN;
      received.push({ url: req.url ?? '', clientCn: Array.isArray(cn) ? cn[0] : cn });
      req.resume();
      req.on('end', () => {
        res.writeHead(201, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ ok: true }));
      });
    },
  );
  server.on('upgrade', (req, socket: Duplex) => {
    received.push({ url: req.url ?? '', clientCn: undefined });
    socket.end(
      'HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n',
    );
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    received,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

let upstreams: Record<string, TlsUpstream>;
let proxy: TestProxy;

beforeAll(async () => {
  upstreams = {
    good: await startTlsUpstream(certs.server),
    wrongHost: await startTlsUpstream(certs.wrongHost),
    expired: await startTlsUpstream(certs.expired),
    unknownCa: await startTlsUpstream(certs.untrusted),
    mtls: await startTlsUpstream(certs.server, { requireClientCert: true }),
  };
  const ca = certs.ca.cert;
  const url = (name: string, host = '127.0.0.1') => `https://${host}:${upstreams[name]!.port}`;
  const yaml = `
upstreams:
  good: { url: "${url('good')}", tls: { ca: "${ca}" } }
  wrongHost: { url: "${url('wrongHost')}", tls: { ca: "${ca}" } }
  renamed: { url: "${url('wrongHost')}", tls: { ca: "${ca}", servername: wrong.example } }
  expired: { url: "${url('expired')}", tls: { ca: "${ca}" } }
  unknownCa: { url: "${url('unknownCa')}", tls: { ca: "${ca}" } }
  unverified: { url: "${url('unknownCa')}", tls: { rejectUnauthorized: false } }
  mtlsMissing: { url: "${url('mtls')}", tls: { ca: "${ca}" } }
  mtls: { url: "${url('mtls')}", tls: { ca: "${ca}", cert: "${certs.client.cert}", key: "${certs.client.key}" } }
routes:
${['good', 'wrongHost', 'renamed', 'expired', 'unknownCa', 'unverified', 'mtlsMissing', 'mtls']
  .map(
    (
      name,
    ) => `  - { name: ${name}, match: { path: "/p/${name}" }, upstream: ${name}, idempotency: {} }
  - { name: pt-${name}, match: { path: "/pt/${name}/**" }, upstream: ${name}, idempotency: false }`,
  )
  .join('\n')}
  - { name: mcp, match: { path: /mcp }, upstream: wrongHost, idempotency: { mcp: {} } }
`;
  proxy = await startProxy({ yaml });
});

afterAll(async () => {
  await proxy?.close();
  for (const upstream of Object.values(upstreams ?? {})) await upstream.close();
  certs.remove();
});

const post = (path: string, key: string): Promise<TestResponse> =>
  send(`${proxy.url}${path}`, {
    method: 'POST',
    headers: { 'idempotency-key': key, 'content-type': 'application/json' },
    body: '{"amount":1}',
  });

async function claims(route: string): Promise<number> {
  const { rows } = await proxy.pool.query<{ n: string }>(
    `SELECT count(*) AS n FROM ${proxy.table} WHERE scope = $1`,
    [route],
  );
  return Number(rows[0]!.n);
}

test('an upstream whose certificate is from the configured private CA gets the request', async () => {
  const response = await post('/p/good', 'good-1');
  expect(response.status).toBe(201);
  expect(upstreams.good!.received.map((r) => r.url)).toEqual(['/p/good']);
  // The answer was stored: the repeat is a replay, the upstream is not called again.
  const repeat = await post('/p/good', 'good-1');
  expect(repeat.headers['idempotent-replayed']).toBe('true');
  expect(upstreams.good!.received).toHaveLength(1);
  const passed = await send(`${proxy.url}/pt/good/x`);
  expect(passed.status).toBe(201);
});

test.each([
  ['wrongHost', 'ERR_TLS_CERT_ALTNAME_INVALID', /hostname mismatch/],
  ['expired', 'CERT_HAS_EXPIRED', /has expired/],
  ['unknownCa', 'UNABLE_TO_VERIFY_LEAF_SIGNATURE', /not from a CA the proxy trusts/],
  ['mtlsMissing', 'CERTIFICATE_REQUIRED', /client certificate required/],
])(
  'an upstream failing TLS (%s) gets 502 UPSTREAM_TLS_FAILED, and the claim is released',
  async (name, code, reason) => {
    const target = name === 'mtlsMissing' ? 'mtls' : name;
    const before = upstreams[target]!.received.length;
    const first = await post(`/p/${name}`, `${name}-1`);
    expect(first.status).toBe(502);
    expect(first.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(first.headers['idempotency-outcome']).toBeUndefined();
    const problem = first.json() as { code: string; detail: string };
    expect(problem.code).toBe('UPSTREAM_TLS_FAILED');
    expect(problem.detail).toContain(code);
    expect(problem.detail).toMatch(reason);
    expect(problem.detail).toContain('retrying with the same key is safe');
    // Nothing was sent, so nothing was kept: the retry forwards (and fails) again, not a replay.
    expect(await claims(name)).toBe(0);
    const retry = await post(`/p/${name}`, `${name}-1`);
    expect(retry.status).toBe(502);
    expect(retry.headers['idempotent-replayed']).toBeUndefined();
    expect((retry.json() as { code: string }).code).toBe('UPSTREAM_TLS_FAILED');
    // The pass-through path refuses the same way.
    const passed = await send(`${proxy.url}/pt/${name}/x`);
    expect(passed.status).toBe(502);
    expect((passed.json() as { detail: string }).detail).toMatch(reason);
    expect(upstreams[target]!.received.length).toBe(before);
    const logged = proxy.logs.filter((line) => line.route === name && line.status === 502);
    expect(logged.map((line) => line.outcome)).toEqual(['upstream_error', 'upstream_error']);
  },
);

test('tls.servername verifies the name the certificate holds instead of the address', async () => {
  const response = await post('/p/renamed', 'renamed-1');
  expect(response.status).toBe(201);
  expect(upstreams.wrongHost!.received.map((r) => r.url)).toContain('/p/renamed');
});

test('an upstream that requires a client certificate gets the configured one', async () => {
  const response = await post('/p/mtls', 'mtls-1');
  expect(response.status).toBe(201);
  expect(upstreams.mtls!.received).toEqual([{ url: '/p/mtls', clientCn: 'client' }]);
});

test('rejectUnauthorized: false accepts a certificate from an unknown CA', async () => {
  const response = await post('/p/unverified', 'unverified-1');
  expect(response.status).toBe(201);
  expect(upstreams.unknownCa!.received.map((r) => r.url)).toEqual(['/p/unverified']);
});

test('on an MCP route the TLS failure is a JSON-RPC error', async () => {
  const response = await send(`${proxy.url}/mcp`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'idempotency-key': 'mcp-1',
    },
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: 7,
      method: 'tools/call',
      params: { name: 'refund', arguments: { amount: 1 } },
    }),
  });
  expect(response.status).toBe(200);
  const message = response.json() as {
    id: number;
    error: { code: number; message: string; data: { code: string } };
  };
  expect(message.id).toBe(7);
  expect(message.error.data.code).toBe('UPSTREAM_TLS_FAILED');
  expect(message.error.message).toMatch(/hostname mismatch/);
  expect(upstreams.wrongHost!.received.map((r) => r.url)).not.toContain('/mcp');
});

/** A websocket handshake through the proxy: the first bytes it answers with. */
function upgrade(path: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(proxy.port, '127.0.0.1', () =>
      socket.write(
        `GET ${path} HTTP/1.1\r\nhost: proxy.test\r\nconnection: upgrade\r\nupgrade: websocket\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n`,
      ),
    );
    let text = '';
    socket.on('data', (chunk: Buffer) => {
      text += chunk.toString();
      if (text.includes('\r\n\r\n') && text.startsWith('HTTP/1.1 101')) {
        socket.destroy();
        resolve(text);
      }
    });
    socket.on('end', () => resolve(text));
    socket.on('error', reject);
  });
}

test('websocket upgrades use the upstream TLS settings, and a failing one answers 502', async () => {
  const ok = await upgrade('/pt/good/socket');
  expect(ok).toMatch(/^HTTP\/1\.1 101/);
  expect(upstreams.good!.received.map((r) => r.url)).toContain('/pt/good/socket');
  const refused = await upgrade('/pt/expired/socket');
  expect(refused).toMatch(/^HTTP\/1\.1 502/);
  expect(refused).toContain('UPSTREAM_TLS_FAILED');
  expect(refused).toMatch(/has expired/);
  expect(upstreams.expired!.received.map((r) => r.url)).not.toContain('/pt/expired/socket');
});
