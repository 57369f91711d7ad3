// SIGTERM with nothing in flight stops the process, whatever connections stay open. A websocket
// passed through to the upstream used to keep it running after "shutting down" for as long as the
// socket lived: an upgraded socket is no longer the HTTP server's to close, yet server.close()
// waits for it. Meanwhile the completion listener, not yet closed, kept reconnecting to a
// PostgreSQL that had stopped.
import { WebSocket, WebSocketServer } from 'ws';
import { startProxyProcess } from '../support/proxy-process';
import { uniqueTable } from '../support/proxy';
import { startUpstream, type TestUpstream } from '../support/upstream';

let upstream: TestUpstream;
let wss: WebSocketServer;
const upstreamSockets: WebSocket[] = [];

beforeAll(async () => {
  upstream = await startUpstream();
  wss = new WebSocketServer({ server: upstream.server });
  wss.on('connection', (socket) => {
    upstreamSockets.push(socket);
    socket.on('message', (data) => socket.send(`echo:${String(data)}`));
  });
});

afterAll(async () => {
  for (const socket of wss.clients) socket.terminate();
  wss.close();
  await upstream.close();
});

test('SIGTERM with an open websocket and 0 requests in flight drains, closes the socket and exits 0', async () => {
  const proxy = await startProxyProcess({
    yaml: `
listen: { host: 127.0.0.1, port: "\${PROXY_PORT}" }
admin: { host: 127.0.0.1, port: "\${ADMIN_PORT}" }
shutdownGrace: 30s
store: { table: ${uniqueTable('shutdown')} }
upstreams: { api: { url: ${upstream.url} } }
routes:
  - { name: jobs, match: { method: POST, path: /jobs }, upstream: api, idempotency: {} }
  - { name: rest, match: { path: /** }, upstream: api }
`,
    env: { LOG_FORMAT: 'json' },
  });
  const client = new WebSocket(`ws://127.0.0.1:${proxy.port}/live`);
  const closed = new Promise<number>((resolve) => client.once('close', (code) => resolve(code)));
  const reply = await new Promise<string>((resolve, reject) => {
    client.once('open', () => client.send('ping'));
    client.once('message', (data) => resolve(String(data)));
    client.once('error', reject);
  });
  expect(reply).toBe('echo:ping');
  expect(upstreamSockets).toHaveLength(1);

  // Before the fix this never resolved: jest's timeout was the only way out.
  expect(await proxy.kill('SIGTERM')).toBe(0);
  await closed;
  const output = proxy.output();
  expect(output).toContain('"inFlight":0');
  expect(output).toContain('"msg":"stopped"');
  expect(output).not.toContain('completion listener lost its connection');
});
