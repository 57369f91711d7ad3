// An answer over maxResponseBytes is streamed to the client as it arrives; its last bytes are held
// back until the record is stored. With the upstream's Content-Length a client takes the answer as
// complete at its last byte, so a retry sent at that moment must be a replay, not a 409.
import http from 'node:http';
import { startProxy, type TestProxy } from '../support/proxy';
import { startUpstream, type TestUpstream } from '../support/upstream';

let upstream: TestUpstream;
let proxy: TestProxy;
const SIZE = 256 * 1024;

beforeAll(async () => {
  upstream = await startUpstream((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': SIZE });
    // Several writes, so the proxy streams it in more than one chunk.
    for (let sent = 0; sent < SIZE; sent += 16 * 1024) res.write(Buffer.alloc(16 * 1024, 1));
    res.end();
  });
  proxy = await startProxy({
    yaml: `
store: { table: "\${TEST_TABLE}" }
upstreams: { api: { url: ${upstream.url} } }
routes:
  - { name: big, match: { path: /big }, upstream: api, idempotency: { maxResponseBytes: 1kb } }
`,
  });
});

afterAll(async () => {
  await proxy?.close();
  await upstream?.close();
});

function post(key: string, onBytes?: (total: number) => void): Promise<http.IncomingMessage> {
  return new Promise((resolve, reject) => {
    const req = http.request(`${proxy.url}/big`, {
      method: 'POST',
      headers: { 'idempotency-key': key, 'content-length': '0' },
    });
    req.on('response', (res) => {
      let total = 0;
      res.on('data', (chunk: Buffer) => {
        total += chunk.length;
        onBytes?.(total);
      });
      res.on('end', () => resolve(res));
    });
    req.on('error', reject);
    req.end();
  });
}

test('a retry sent the moment the last byte of a streamed answer arrives is a replay', async () => {
  for (let round = 0; round < 10; round++) {
    const key = `streamed-${round}`;
    let retry: Promise<http.IncomingMessage> | undefined;
    await post(key, (total) => {
      if (total === SIZE) retry = post(key);
    });
    const replay = await retry!;
    expect([replay.statusCode, replay.headers['idempotent-replayed']]).toEqual([200, 'true']);
    expect(replay.headers['idempotent-body-omitted']).toBe('true');
  }
  expect(upstream.executions()).toHaveLength(10);
});
