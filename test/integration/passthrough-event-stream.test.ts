// Event streams through a pass-through route (an EventSource, an MCP client's GET): the head goes
// out at once, and a subscription's silence is not an upstream timeout; any other GET's is.
import { startProxy, type TestProxy } from '../support/proxy';
import { sleep, startUpstream, type TestUpstream } from '../support/upstream';

let upstream: TestUpstream;
let proxy: TestProxy;
/** Lets the upstream's open answers send their body. */
const waiting: (() => void)[] = [];

beforeAll(async () => {
  upstream = await startUpstream(async (req, res) => {
    res.writeHead(200, {
      'content-type': req.url === '/events' ? 'text/event-stream' : 'text/plain',
    });
    res.flushHeaders();
    await new Promise<void>((resolve) => waiting.push(resolve));
    res.end('data: late\n\n');
  });
  proxy = await startProxy({
    yaml: `
upstreams:
  app: { url: ${upstream.url}, timeout: 1s }
routes:
  - name: app
    match: { path: /** }
    upstream: app
`,
  });
});
afterAll(async () => {
  for (const resolve of waiting.splice(0)) resolve();
  await proxy?.close();
  await upstream?.close();
});

test('a subscription gets the head before any event, and its quiet stream is not cut', async () => {
  // The upstream sends no body until told: the fetch resolving at all means the head came first.
  const response = await fetch(`${proxy.url}/events`, { headers: { accept: 'text/event-stream' } });
  expect(response.status).toBe(200);
  expect(response.headers.get('content-type')).toBe('text/event-stream');
  await sleep(3_000); // three times the route's timeout, with no byte on the stream
  for (const resolve of waiting.splice(0)) resolve();
  expect(await response.text()).toBe('data: late\n\n');
});

test('any other GET whose upstream stays silent past its timeout is cut off', async () => {
  // The proxy holds a plain answer's head until its body starts: the client's request just fails.
  const read = fetch(`${proxy.url}/plain`).then((response) => response.text());
  await expect(read).rejects.toThrow();
});
