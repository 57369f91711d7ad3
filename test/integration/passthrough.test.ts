// Pass-through routes: streamed both ways through http-proxy, hop-by-hop headers stripped,
// X-Forwarded-* added, base paths and stripPrefix applied, websockets, and 502/504 problems.
import http from 'node:http';
import { WebSocket, WebSocketServer } from 'ws';
import { send } from '../support/http';
import { startProxy, type TestProxy } from '../support/proxy';
import { sleep, startUpstream, type TestUpstream } from '../support/upstream';

let upstream: TestUpstream;
let proxy: TestProxy;
let wss: WebSocketServer;

beforeAll(async () => {
  upstream = await startUpstream(async (req, res, raw) => {
    if (req.url.includes('slow')) await sleep(1_000);
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
  wss = new WebSocketServer({ server: upstream.server });
  wss.on('connection', (socket, req) => {
    socket.on('message', (data) => socket.send(`echo:${data.toString()} from ${req.url}`));
  });
  proxy = await startProxy({
    yaml: `
store: { table: "\${TEST_TABLE}" }
upstreams:
  api: { url: ${upstream.url}/base, timeout: 300ms }
  dead: { url: http://127.0.0.1:1 }
routes:
  - { name: mail, match: { path: /mail/**, host: mail.internal }, upstream: api, stripPrefix: /mail }
  - { name: dead, match: { path: /dead/** }, upstream: dead }
  - { name: only-get, match: { method: GET, path: /only-get }, upstream: api }
  - { name: items, match: { path: /items/:id }, upstream: api }
`,
  });
});

afterAll(async () => {
  wss.close();
  await proxy?.close();
  await upstream?.close();
});

beforeEach(() => {
  upstream.received.length = 0;
});

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
