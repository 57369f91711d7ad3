// Pass-through routes: streamed both ways through undici (websockets through the relay), hop-by-hop
// headers stripped, X-Forwarded-* added, base paths and stripPrefix applied, framing kept, either
// side going away aborting the other, and 502/504 problems.
import { createHash } from 'node:crypto';
import http from 'node:http';
import { WebSocket, WebSocketServer } from 'ws';
import { until } from '../support/eventually';
import { send } from '../support/http';
import { startProxy, type TestProxy } from '../support/proxy';
import { sleep, startUpstream, type TestUpstream } from '../support/upstream';

let upstream: TestUpstream;
let proxy: TestProxy;
let wss: WebSocketServer;
/** The upgrade requests the upstream's websocket server accepted. */
const upgrades: http.IncomingMessage[] = [];
/** Requests the upstream holds without answering, as they arrive (before their body is read). */
const holding: http.IncomingMessage[] = [];
/**
 * An upstream that refuses every upgrade in raw bytes: a 403 whose body is chunked in two pieces,
 * or, for a path with "sized" in it, one with a Content-Length. It records the request lines, and
 * answers a plain request 204.
 */
let refuser: http.Server;
const refusedLines: string[] = [];
const BIG_BYTES = 8 * 1024 * 1024;

beforeAll(async () => {
  upstream = await startUpstream(async (req, res, raw) => {
    // Well past the route's 300 ms timeout: undici's timers fire up to ~1 s late, more under load.
    // (unref'd: the file's last test may end before it does).
    if (req.url.includes('slow'))
      await new Promise((resolve) => setTimeout(resolve, 4_000).unref());
    if (req.url.includes('hold')) return; // never answered: the client gives up
    if (req.url.includes('big')) {
      res.writeHead(200, {
        'content-type': 'application/octet-stream',
        'x-body-bytes': String(req.body.length),
        'x-body-sha256': createHash('sha256').update(req.body).digest('hex'),
      });
      const chunk = Buffer.alloc(64 * 1024, 'a');
      for (let sent = 0; sent < BIG_BYTES; sent += chunk.length) {
        if (!res.write(chunk)) await new Promise((resolve) => res.once('drain', resolve));
      }
      res.end();
      return;
    }
    if (req.url.includes('cookies')) {
      res.writeHead(200, [
        ['content-type', 'text/plain'],
        ['set-cookie', 'a=1; Path=/'],
        ['set-cookie', 'b=2; HttpOnly'],
      ] as unknown as http.OutgoingHttpHeaders);
      res.end('two cookies');
      return;
    }
    if (req.method === 'HEAD') {
      res.writeHead(200, { 'content-type': 'text/plain', 'content-length': '42', 'x-head': 'yes' });
      res.end();
      return;
    }
    if (req.url.includes('cut')) {
      res.writeHead(200, { 'content-type': 'text/plain', 'content-length': '100' });
      res.write('only part');
      setTimeout(() => raw.socket.destroy(), 20);
      return;
    }
    if (req.url.includes('stream')) {
      res.writeHead(200, {
        'content-type': 'text/plain',
        'x-custom': 'kept',
        'keep-alive': 'timeout=5',
        connection: 'keep-alive, x-private',
        'x-private': 'secret',
      });
      for (let i = 0; i < 5; i++) {
        res.write(`chunk-${i};`);
        await sleep(20);
      }
      res.end();
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ method: req.method, url: req.url, body: req.body.toString() }));
  });
  upstream.server.on('request', (raw: http.IncomingMessage) => {
    if (raw.url?.includes('hold')) holding.push(raw);
  });
  // An upgrade to a path with "forbidden" in it is refused with 401, as an upstream's auth would.
  wss = new WebSocketServer({
    server: upstream.server,
    verifyClient: (info: { req: http.IncomingMessage }) => !info.req.url?.includes('forbidden'),
  });
  wss.on('connection', (socket, req) => {
    upgrades.push(req);
    socket.on('message', (data) => socket.send(`echo:${data.toString()} from ${req.url}`));
  });
  refuser = http.createServer((req, res) => {
    refusedLines.push(`${req.method} ${req.url}`);
    res.writeHead(204).end();
  });
  refuser.on('upgrade', (req: http.IncomingMessage, socket) => {
    refusedLines.push(`${req.method} ${req.url}`);
    const head =
      'HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nX-Reason: no-sockets\r\n';
    if (req.url?.includes('sized'))
      socket.end(`${head}Content-Length: 15\r\nConnection: close\r\n\r\n{"denied":true}`);
    else
      socket.end(
        `${head}Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n` +
          '7\r\n{"denie\r\n8\r\nd":true}\r\n0\r\n\r\n',
      );
  });
  await new Promise<void>((resolve) => refuser.listen(0, '127.0.0.1', resolve));
  const refuserPort = (refuser.address() as { port: number }).port;
  proxy = await startProxy({
    yaml: `
store: { table: "\${TEST_TABLE}" }
upstreams:
  api: { url: ${upstream.url}/base, timeout: 300ms }
  # The large body's own: 13 MB up and down on a loaded machine once took longer than 300 ms.
  bulk: { url: ${upstream.url}/base, timeout: 30s }
  refuser: { url: http://127.0.0.1:${refuserPort} }
  dead: { url: http://127.0.0.1:1 }
routes:
  - { name: mail, match: { path: /mail/**, host: mail.internal }, upstream: api, stripPrefix: /mail }
  - { name: dead, match: { path: /dead/** }, upstream: dead }
  - { name: only-get, match: { method: GET, path: /only-get }, upstream: api }
  - { name: big, match: { path: /items/big }, upstream: bulk }
  - { name: items, match: { path: /items/:id }, upstream: api }
  - { name: sockets, match: { path: /sockets/** }, upstream: refuser }
`,
  });
});

afterAll(async () => {
  wss.close();
  refuser.closeAllConnections();
  await new Promise((resolve) => refuser.close(resolve));
  await proxy?.close();
  await upstream?.close();
});

beforeEach(() => {
  upstream.received.length = 0;
  holding.length = 0;
});

/** Resolves when the upstream has a held request, with it. */
async function heldRequest(): Promise<http.IncomingMessage> {
  return until(() => holding[0], 'a held request at the upstream', { intervalMs: 10 });
}

/** Resolves when the upstream's side of a held request's connection is closed. */
function closed(raw: http.IncomingMessage): Promise<void> {
  return new Promise((resolve) => {
    if (raw.socket.destroyed) return resolve();
    raw.socket.once('close', () => resolve());
  });
}

test('forwards the method, path, query and body, with the base path and X-Forwarded-* headers', async () => {
  const res = await send(`${proxy.url}/items/42?x=1`, {
    method: 'PATCH',
    headers: {
      'content-type': 'text/plain',
      'x-forwarded-for': '10.0.0.9',
      'proxy-authorization': 'Basic c2VjcmV0',
      te: 'trailers',
    },
    body: 'hello',
  });
  expect(res.status).toBe(200);
  expect(res.json()).toEqual({ method: 'PATCH', url: '/base/items/42?x=1', body: 'hello' });
  const seen = upstream.received[0]!;
  expect(seen.headers['x-forwarded-for']).toBe('10.0.0.9, 127.0.0.1');
  expect(seen.headers['x-forwarded-proto']).toBe('http');
  expect(seen.headers['x-forwarded-host']).toBe(`127.0.0.1:${proxy.port}`);
  expect(seen.headers['proxy-authorization']).toBeUndefined();
  expect(seen.headers.te).toBeUndefined();
  expect(seen.headers.host).toBe(`127.0.0.1:${upstream.port}`);
});

test('strips the prefix and routes by Host', async () => {
  const res = await send(`${proxy.url}/mail/emails`, {
    method: 'POST',
    headers: { host: 'mail.internal:8080' },
    body: 'x',
  });
  expect(res.json()).toMatchObject({ url: '/base/emails' });
  const wrongHost = await send(`${proxy.url}/mail/emails`, {
    method: 'POST',
    headers: { host: 'other' },
    body: 'x',
  });
  expect(wrongHost.status).toBe(404);
  expect(wrongHost.headers['content-type']).toBe('application/problem+json');
  expect(wrongHost.json()).toMatchObject({ code: 'ROUTE_NOT_FOUND', status: 404 });
});

test('answers 404 problem+json when the method does not match', async () => {
  const res = await send(`${proxy.url}/only-get`, { method: 'POST', body: 'x' });
  expect(res.status).toBe(404);
  expect(upstream.received).toHaveLength(0);
});

test('streams the response and strips hop-by-hop response headers', async () => {
  const chunks: number[] = [];
  const res = await new Promise<http.IncomingMessage>((resolve) =>
    http.get(`${proxy.url}/items/stream`, resolve),
  );
  const body = await new Promise<string>((resolve) => {
    let text = '';
    res.on('data', (chunk: Buffer) => {
      chunks.push(Date.now());
      text += chunk.toString();
    });
    res.on('end', () => resolve(text));
  });
  expect(body).toBe('chunk-0;chunk-1;chunk-2;chunk-3;chunk-4;');
  expect(chunks.length).toBeGreaterThan(1); // delivered as it came, not buffered into one write
  expect(res.headers['x-custom']).toBe('kept');
  expect(res.headers['x-private']).toBeUndefined();
  expect(res.headers['keep-alive']).toBeUndefined();
});

test('cuts the client off when the upstream dies mid-body, instead of leaving it waiting', async () => {
  const started = Date.now();
  const outcome = await new Promise<{ complete: boolean; body: string }>((resolve) => {
    http.get(`${proxy.url}/items/cut`, (res) => {
      let body = '';
      res.on('data', (chunk: Buffer) => (body += chunk.toString()));
      res.on('close', () => resolve({ complete: res.complete, body }));
      res.on('error', () => undefined);
    });
  });
  expect(outcome).toEqual({ complete: false, body: 'only part' });
  expect(Date.now() - started).toBeLessThan(2_000); // not the 5 s keep-alive idle timeout
});

test('maps an unreachable upstream to 502 and a timeout to 504, as problem+json', async () => {
  const dead = await send(`${proxy.url}/dead/x`, { method: 'GET' });
  expect(dead.status).toBe(502);
  expect(dead.json()).toMatchObject({ code: 'UPSTREAM_UNREACHABLE', route: 'dead' });
  const slow = await send(`${proxy.url}/items/slow`, { method: 'GET' });
  expect(slow.status).toBe(504);
  expect(slow.json()).toMatchObject({ code: 'UPSTREAM_TIMEOUT', route: 'items' });
});

test('proxies websocket upgrades', async () => {
  const socket = new WebSocket(`ws://127.0.0.1:${proxy.port}/items/ws`);
  const reply = await new Promise<string>((resolve, reject) => {
    socket.on('open', () => socket.send('ping'));
    socket.on('message', (data) => resolve(data.toString()));
    socket.on('error', reject);
  });
  socket.close();
  expect(reply).toBe('echo:ping from /base/items/ws');
});

test('sends the upgrade with the upstream as Host, and relays frames both ways', async () => {
  upgrades.length = 0;
  const socket = new WebSocket(`ws://127.0.0.1:${proxy.port}/items/ws`);
  const replies: string[] = [];
  await new Promise<void>((resolve, reject) => {
    socket.on('open', () => {
      socket.send('one');
      socket.send('two');
    });
    socket.on('message', (data) => {
      replies.push(data.toString());
      if (replies.length === 2) resolve();
    });
    socket.on('error', reject);
  });
  socket.close();
  expect(replies).toEqual(['echo:one from /base/items/ws', 'echo:two from /base/items/ws']);
  expect(upgrades.map((req) => req.headers.host)).toEqual([new URL(upstream.url).host]);
});

test("passes on an upstream's refusal to switch protocols as it came", async () => {
  const socket = new WebSocket(`ws://127.0.0.1:${proxy.port}/items/forbidden`);
  const status = await new Promise<number>((resolve, reject) => {
    socket.on('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0));
    socket.on('open', () => reject(new Error('the upgrade went through')));
  });
  socket.on('error', () => undefined); // closing before an upgrade that never came is an error
  socket.terminate();
  expect(status).toBe(401);
});

/** An upgrade handshake sent in raw bytes; resolves with everything the proxy wrote back. */
async function rawUpgrade(path: string): Promise<string> {
  const net = await import('node:net');
  return new Promise<string>((resolve, reject) => {
    const socket = net.connect(proxy.port, '127.0.0.1', () =>
      socket.write(
        `GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n` +
          'Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n',
      ),
    );
    let text = '';
    socket.on('data', (data: Buffer) => (text += data.toString()));
    socket.on('close', () => resolve(text));
    socket.on('error', reject);
  });
}

test('sends an upgrade to the path a plain request goes to, its query kept as written', async () => {
  refusedLines.length = 0;
  await rawUpgrade('/sockets/feed?a=1&&b=%2F;c');
  await send(`${proxy.url}/sockets/feed?a=1&&b=%2F;c`, { method: 'GET' });
  // An empty query is no query, for an upgrade as for any forwarded request.
  await rawUpgrade('/sockets/feed?');
  await send(`${proxy.url}/sockets/feed?`, { method: 'GET' });
  expect(refusedLines).toEqual([
    'GET /sockets/feed?a=1&&b=%2F;c',
    'GET /sockets/feed?a=1&&b=%2F;c',
    'GET /sockets/feed',
    'GET /sockets/feed',
  ]);
});

test("passes on a refused upgrade's status, headers and body, then closes", async () => {
  const chunked = await rawUpgrade('/sockets/feed');
  const [chunkedHead] = chunked.split('\r\n\r\n', 1) as [string];
  expect(chunkedHead).toMatch(/^HTTP\/1\.1 403 Forbidden\r\n/);
  expect(chunkedHead.toLowerCase()).toContain('x-reason: no-sockets');
  expect(chunkedHead.toLowerCase()).toContain('content-type: application/json');
  // Without a Content-Length, the body comes chunked (it may be cut into other pieces).
  expect(chunkedHead.toLowerCase()).toContain('transfer-encoding: chunked');
  expect(dechunk(chunked.slice(chunkedHead.length + 4))).toBe('{"denied":true}');

  const sized = await rawUpgrade('/sockets/sized');
  const [sizedHead, sizedBody] = sized.split('\r\n\r\n', 2) as [string, string];
  expect(sizedHead).toMatch(/^HTTP\/1\.1 403 Forbidden\r\n/);
  expect(sizedHead.toLowerCase()).toContain('content-length: 15');
  expect(sizedHead.toLowerCase()).not.toContain('transfer-encoding');
  expect(sizedBody).toBe('{"denied":true}');
});

/** The payload of a chunked body, its chunk framing removed; throws on a malformed one. */
function dechunk(framed: string): string {
  let rest = framed;
  let payload = '';
  for (;;) {
    const lineEnd = rest.indexOf('\r\n');
    if (lineEnd < 0) throw new Error(`no chunk size line in ${JSON.stringify(rest)}`);
    const size = Number.parseInt(rest.slice(0, lineEnd), 16);
    if (Number.isNaN(size)) throw new Error(`bad chunk size in ${JSON.stringify(rest)}`);
    if (size === 0) return payload;
    payload += rest.slice(lineEnd + 2, lineEnd + 2 + size);
    rest = rest.slice(lineEnd + 2 + size + 2);
  }
}

test('refuses a websocket upgrade that matches no route', async () => {
  const socket = new WebSocket(`ws://127.0.0.1:${proxy.port}/nowhere`);
  const error = await new Promise<Error>((resolve) => socket.on('error', resolve));
  expect(error.message).toMatch(/404/);
});

test('honours a client that asks for Connection: close', async () => {
  const net = await import('node:net');
  const started = Date.now();
  const response = await new Promise<string>((resolve, reject) => {
    const socket = net.connect(proxy.port, '127.0.0.1', () =>
      socket.write('GET /items/1 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n'),
    );
    let text = '';
    socket.on('data', (data: Buffer) => (text += data.toString()));
    socket.on('end', () => resolve(text));
    socket.on('error', reject);
  });
  expect(response.toLowerCase()).toContain('connection: close');
  expect(Date.now() - started).toBeLessThan(2_000); // closed by us, not by an idle timeout (5 s)
});

test('streams a large body up and a large answer down, intact', async () => {
  const body = Buffer.alloc(5 * 1024 * 1024);
  for (let i = 0; i < body.length; i++) body[i] = i % 251;
  const res = await send(`${proxy.url}/items/big`, {
    method: 'PUT',
    headers: { 'content-type': 'application/octet-stream' },
    body,
  });
  expect(res.status).toBe(200);
  expect(res.body.length).toBe(BIG_BYTES);
  expect(res.headers['x-body-bytes']).toBe(String(body.length));
  expect(res.headers['x-body-sha256']).toBe(createHash('sha256').update(body).digest('hex'));
  const seen = upstream.received[0]!;
  expect(seen.headers['content-length']).toBe(String(body.length));
  expect(seen.headers['transfer-encoding']).toBeUndefined();
});

test('keeps a chunked body chunked and a Content-Length body framed by its length', async () => {
  const chunked = await send(`${proxy.url}/items/7`, {
    method: 'POST',
    body: 'abc',
    chunked: true,
  });
  expect(chunked.json()).toMatchObject({ method: 'POST', body: 'abc' });
  expect(upstream.received[0]!.headers['transfer-encoding']).toBe('chunked');
  expect(upstream.received[0]!.headers['content-length']).toBeUndefined();
  const sized = await send(`${proxy.url}/items/7`, { method: 'POST', body: 'abcd' });
  expect(sized.json()).toMatchObject({ method: 'POST', body: 'abcd' });
  expect(upstream.received[1]!.headers['content-length']).toBe('4');
  expect(upstream.received[1]!.headers['transfer-encoding']).toBeUndefined();
  // A bodiless GET goes up without framing headers.
  await send(`${proxy.url}/items/7`, { method: 'GET' });
  expect(upstream.received[2]!.headers['content-length']).toBeUndefined();
  expect(upstream.received[2]!.headers['transfer-encoding']).toBeUndefined();
});

test('answers HEAD with the upstream headers and no body', async () => {
  const res = await send(`${proxy.url}/items/head`, { method: 'HEAD' });
  expect(res.status).toBe(200);
  expect(res.headers['content-length']).toBe('42');
  expect(res.headers['x-head']).toBe('yes');
  expect(res.body.length).toBe(0);
  expect(upstream.received[0]!.method).toBe('HEAD');
});

test('relays every Set-Cookie line of the answer', async () => {
  const res = await send(`${proxy.url}/items/cookies`, { method: 'GET' });
  expect(res.headers['set-cookie']).toEqual(['a=1; Path=/', 'b=2; HttpOnly']);
  expect(res.text()).toBe('two cookies');
});

test('answers Expect: 100-continue and forwards the body that follows', async () => {
  const outcome = await new Promise<{ continued: boolean; status: number; body: string }>(
    (resolve, reject) => {
      let continued = false;
      const req = http.request(`${proxy.url}/items/9`, {
        method: 'POST',
        headers: { expect: '100-continue', 'content-length': '5', 'content-type': 'text/plain' },
      });
      req.on('continue', () => {
        continued = true;
        req.end('hello');
      });
      req.on('response', (res) => {
        let body = '';
        res.on('data', (chunk: Buffer) => (body += chunk.toString()));
        res.on('end', () => resolve({ continued, status: res.statusCode ?? 0, body }));
      });
      req.on('error', reject);
    },
  );
  expect(outcome.continued).toBe(true);
  expect(outcome.status).toBe(200);
  expect(JSON.parse(outcome.body)).toMatchObject({ method: 'POST', body: 'hello' });
  expect(upstream.received[0]!.body.toString()).toBe('hello');
});

test('aborts the upstream request when the client hangs up waiting for the answer', async () => {
  const client = http.get(`${proxy.url}/items/hold`);
  client.on('error', () => undefined);
  const held = await heldRequest();
  client.destroy();
  await closed(held); // the proxy closed its upstream connection: the request is abandoned
  expect(held.socket.destroyed).toBe(true);
});

test('aborts the upload when the client hangs up mid-body', async () => {
  const client = http.request(`${proxy.url}/items/hold-upload`, {
    method: 'POST',
    headers: { 'content-length': String(1024 * 1024) },
  });
  client.on('error', () => undefined);
  client.write(Buffer.alloc(64 * 1024, 'x'));
  const held = await heldRequest();
  const aborted = new Promise<boolean>((resolve) => {
    held.on('aborted', () => resolve(true));
    held.on('end', () => resolve(false));
    held.on('error', () => undefined);
    held.resume();
  });
  client.destroy();
  expect(await aborted).toBe(true); // the upstream never saw a complete body
  await closed(held);
});

test('answers 504 when the upstream sits on a large upload without answering', async () => {
  // A body this large (≥ 64 KiB) is timed by the proxy's own idle timer instead of undici's.
  const res = await send(`${proxy.url}/items/hold-large`, {
    method: 'PUT',
    body: Buffer.alloc(256 * 1024, 'u'),
  });
  expect(res.status).toBe(504);
  expect(res.json()).toMatchObject({ code: 'UPSTREAM_TIMEOUT', route: 'items' });
  expect((await heldRequest()).headers['content-length']).toBe(String(256 * 1024));
});
