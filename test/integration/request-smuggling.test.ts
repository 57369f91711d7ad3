// Regression: http-proxy 1.18.1 rewrites a chunked DELETE/OPTIONS to `content-length: 0` but still
// pipes the body, so the upstream parses the body as a second, smuggled request
// (node-http-proxy #1720/#1721). The pass-through path must deliver exactly one request, body intact.
import net from 'node:net';
import { startProxy, type TestProxy } from '../support/proxy';
import { sleep, startUpstream, type TestUpstream } from '../support/upstream';

let upstream: TestUpstream;
let proxy: TestProxy;

beforeAll(async () => {
  upstream = await startUpstream((req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.end(`got ${req.method} ${req.url} body=${req.body.length}`);
  });
  proxy = await startProxy({
    yaml: `
store: { table: "\${TEST_TABLE}" }
upstreams: { api: { url: ${upstream.url} } }
routes:
  - { name: rest, match: { path: /** }, upstream: api }
`,
  });
});

afterAll(async () => {
  await proxy?.close();
  await upstream?.close();
});

test.each(['DELETE', 'OPTIONS'])(
  'a chunked %s body reaches the upstream as one request, not two',
  async (method) => {
    upstream.received.length = 0;
    const smuggled = 'GET /admin/secret HTTP/1.1\r\nHost: internal\r\n\r\n';
    const chunk = (text: string): string =>
      `${Buffer.byteLength(text).toString(16)}\r\n${text}\r\n`;
    const raw =
      `${method} /things/1 HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n` +
      chunk(smuggled) +
      '0\r\n\r\n';
    const response = await new Promise<string>((resolve, reject) => {
      const socket = net.connect(proxy.port, '127.0.0.1', () => socket.write(raw));
      let text = '';
      socket.on('data', (data: Buffer) => (text += data.toString()));
      socket.on('end', () => resolve(text));
      socket.on('error', reject);
    });
    // A fixed wait: a smuggled second request would reach the upstream after the first's answer,
    // and what is asserted is that none does (an absence cannot be polled for).
    await sleep(100);
    expect(response).toContain('200 OK');
    expect(upstream.received.map((r) => `${r.method} ${r.url}`)).toEqual([`${method} /things/1`]);
    expect(upstream.received[0]!.body.toString()).toBe(smuggled);
    expect(upstream.received.some((r) => r.url.includes('/admin/secret'))).toBe(false);
  },
);
