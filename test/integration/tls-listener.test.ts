// The proxy's and the admin's listeners over TLS, with real TLS clients (undici, node:tls): a client
// trusting the private CA gets through and the upstream hears X-Forwarded-Proto: https; ALPN is
// http/1.1; clientAuth require refuses a client without a certificate from ca (nothing reaches
// the upstream), none lets it in.
import type { AddressInfo } from 'node:net';
import tls from 'node:tls';
import { Agent, request } from 'undici';
import { startProxy, type TestProxy } from '../support/proxy';
import { startUpstream, type TestUpstream } from '../support/upstream';
import { makeTestCertificates, pem } from '../support/test-certificates';

const certs = makeTestCertificates();
let upstream: TestUpstream;
let plain: TestProxy; // clientAuth none, admin over TLS too
let mutual: TestProxy; // clientAuth require

const listenTls = (clientAuth: string) =>
  `{ cert: "${certs.server.cert}", key: "${certs.server.key}", ca: "${certs.ca.cert}", clientAuth: ${clientAuth} }`;

beforeAll(async () => {
  upstream = await startUpstream();
  const routes = `
upstreams: { api: { url: "${upstream.url}" } }
routes:
  - { name: jobs, match: { method: POST, path: /jobs }, upstream: api, idempotency: {} }
  - { name: rest, match: { path: "/**" }, upstream: api, idempotency: false }
`;
  plain = await startProxy({
    yaml: `listen: { tls: ${listenTls('none')} }\nadmin: { tls: ${listenTls('none')} }\n${routes}`,
  });
  mutual = await startProxy({ yaml: `listen: { tls: ${listenTls('require')} }\n${routes}` });
});

afterAll(async () => {
  await plain?.close();
  await mutual?.close();
  await upstream?.close();
  certs.remove();
});

const port = (proxy: TestProxy): number => (proxy.app.server.address() as AddressInfo).port;

function client(options: { ca?: boolean; cert?: boolean } = {}): Agent {
  return new Agent({
    connect: {
      ...(options.ca === false ? {} : { ca: pem(certs.ca.cert) }),
      ...(options.cert ? { cert: pem(certs.client.cert), key: pem(certs.client.key) } : {}),
    },
  });
}

async function post(proxy: TestProxy, key: string, agent: Agent) {
  const response = await request(`https://localhost:${port(proxy)}/jobs`, {
    method: 'POST',
    headers: { 'idempotency-key': key, 'content-type': 'application/json' },
    body: '{"n":1}',
    dispatcher: agent,
  });
  return { status: response.statusCode, body: await response.body.text() };
}

test('a client trusting the CA gets through; the upstream hears X-Forwarded-Proto: https', async () => {
  const agent = client();
  const response = await post(plain, 'tls-1', agent);
  expect(response.status).toBe(201);
  const received = upstream.received.filter((r) => r.headers['idempotency-key'] === 'tls-1');
  expect(received).toHaveLength(1);
  expect(received[0]!.headers['x-forwarded-proto']).toBe('https');
  // The pass-through path too.
  const passed = await request(`https://localhost:${port(plain)}/x`, { dispatcher: agent });
  await passed.body.text();
  expect(upstream.received.at(-1)!.headers['x-forwarded-proto']).toBe('https');
  await agent.close();
});

test('a client that does not trust the CA refuses the listener (the proxy is not reached)', async () => {
  const before = upstream.received.length;
  const agent = client({ ca: false });
  // The listener sends its chain up to the CA (it has the ca file): a CA the client does not know.
  await expect(post(plain, 'tls-2', agent)).rejects.toMatchObject({
    code: 'SELF_SIGNED_CERT_IN_CHAIN',
  });
  expect(upstream.received.length).toBe(before);
  await agent.close();
});

test('the listener negotiates ALPN http/1.1 and refuses a client offering only h2', async () => {
  const offered = (protocols: string[]) =>
    new Promise<string | false | null>((resolve, reject) => {
      const socket = tls.connect({
        port: port(plain),
        host: '127.0.0.1',
        servername: 'localhost',
        ca: pem(certs.ca.cert),
        ALPNProtocols: protocols,
      });
      socket.once('secureConnect', () => {
        resolve(socket.alpnProtocol);
        socket.destroy();
      });
      socket.once('error', reject);
    });
  expect(await offered(['h2', 'http/1.1'])).toBe('http/1.1');
  await expect(offered(['h2'])).rejects.toMatchObject({
    code: 'ERR_SSL_TLSV1_ALERT_NO_APPLICATION_PROTOCOL',
  });
});

test('clientAuth require: refused without a client certificate, served with one from ca', async () => {
  const before = upstream.received.length;
  const anonymous = client();
  await expect(post(mutual, 'mtls-1', anonymous)).rejects.toMatchObject({
    code: expect.stringMatching(/CERTIFICATE_REQUIRED|UND_ERR_SOCKET|ECONNRESET/),
  });
  expect(upstream.received.length).toBe(before);
  // A certificate from another CA is refused as well.
  const stranger = new Agent({
    connect: {
      ca: pem(certs.ca.cert),
      cert: pem(certs.untrusted.cert),
      key: pem(certs.untrusted.key),
    },
  });
  await expect(post(mutual, 'mtls-2', stranger)).rejects.toThrow();
  expect(upstream.received.length).toBe(before);
  const known = client({ cert: true });
  const response = await post(mutual, 'mtls-3', known);
  expect(response.status).toBe(201);
  expect(upstream.received.filter((r) => r.headers['idempotency-key'] === 'mtls-3')).toHaveLength(
    1,
  );
  await Promise.all([anonymous.close(), stranger.close(), known.close()]);
});

test('clientAuth none: a client with or without a certificate is served', async () => {
  const withCert = client({ cert: true });
  expect((await post(plain, 'none-1', withCert)).status).toBe(201);
  await withCert.close();
});

test('the admin listener serves its endpoints over TLS', async () => {
  const agent = client();
  const adminPort = Number(new URL(plain.adminUrl).port);
  const response = await request(`https://localhost:${adminPort}/healthz`, { dispatcher: agent });
  expect(response.statusCode).toBe(200);
  expect(await response.body.json()).toEqual({ status: 'ok' });
  await agent.close();
});
