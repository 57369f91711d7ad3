// Idempotency-Expires: every delivery of a stored answer — the first, and each replay, whether the
// database, the replay cache or the key's first request in this process answered it — says when
// its record expires, as one HTTP date taken from the database's expires_at.
import { postJson } from '../support/http';
import { postRawMcp } from '../support/mcp-raw-post';
import { startProxy, type TestProxy } from '../support/proxy';
import { sleep, startUpstream, type TestUpstream } from '../support/upstream';

const TTL_MS = 2 * 3_600_000;
const WINDOW_MS = 10 * 60_000;

let upstream: TestUpstream;
let proxy: TestProxy;

beforeAll(async () => {
  upstream = await startUpstream(async (req, res) => {
    if (req.url.startsWith('/slow')) await sleep(300);
    if (req.url === '/mcp') {
      const { id } = JSON.parse(req.body.toString()) as { id: unknown };
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ jsonrpc: '2.0', id, result: { content: [] } }));
      return;
    }
    if (req.url === '/drop') {
      res.destroy();
      return;
    }
    if (req.url === '/big') {
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.end('x'.repeat(4096));
      return;
    }
    res.writeHead(201, { 'content-type': 'application/json' });
    res.end('{"ok":true}');
  });
  proxy = await startProxy({
    yaml: `
store:
  table: \${TEST_TABLE}
upstreams:
  api: { url: ${upstream.url} }
routes:
  - name: refunds
    match: { path: /refunds }
    upstream: api
    idempotency: { ttl: 2h }
  - name: slow
    match: { path: /slow }
    upstream: api
    idempotency: { ttl: 2h, onConcurrent: wait }
  - name: derived
    match: { path: /derived }
    upstream: api
    idempotency: { ttl: 2h, key: { derive: [body], window: 10m } }
  - name: drop
    match: { path: /drop }
    upstream: api
    idempotency: { ttl: 2h }
  - name: big
    match: { path: /big }
    upstream: api
    idempotency: { ttl: 2h, maxResponseBytes: 1kb }
  - name: tools
    match: { path: /mcp }
    upstream: api
    idempotency: { ttl: 2h, mcp: {} }
`,
  });
});

afterAll(async () => {
  await proxy?.close();
  await upstream?.close();
});

const expiresOf = (headers: Record<string, unknown>): number =>
  Date.parse(headers['idempotency-expires'] as string);

/** The header is an HTTP date `ttl` after the answer was stored, to the second. */
function expectWithin(header: unknown, before: number, after: number, ttlMs: number): void {
  expect(header).toMatch(/^[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT$/);
  const at = Date.parse(header as string);
  expect(at).toBeGreaterThanOrEqual(Math.floor((before + ttlMs) / 1000) * 1000 - 1000);
  expect(at).toBeLessThanOrEqual(after + ttlMs + 1000);
}

test('the first answer and every replay carry one Idempotency-Expires: ttl after it was stored', async () => {
  const before = Date.now();
  const first = await postJson(`${proxy.url}/refunds`, 'exp-1', { a: 1 });
  const after = Date.now();
  expect(first.status).toBe(201);
  expectWithin(first.headers['idempotency-expires'], before, after, TTL_MS);
  // The first repeat is answered by the database, the next ones by the replay cache it admitted.
  const replays = [];
  for (let n = 0; n < 3; n++)
    replays.push(await postJson(`${proxy.url}/refunds`, 'exp-1', { a: 1 }));
  for (const replay of replays) {
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(replay.headers['idempotency-expires']).toBe(first.headers['idempotency-expires']);
  }
  expect(proxy.cache?.size).toBeGreaterThan(0);
  expect(upstream.executions().filter((r) => r.url === '/refunds')).toHaveLength(1);
});

test('repeats that waited on the first request get its expiry too', async () => {
  const calls = [1, 2, 3].map(() => postJson(`${proxy.url}/slow`, 'exp-slow', { s: 1 }));
  const answers = await Promise.all(calls);
  const values = new Set(answers.map((a) => a.headers['idempotency-expires']));
  expect(values.size).toBe(1);
  expect([...values][0]).toBeDefined();
  expect(upstream.executions().filter((r) => r.url === '/slow')).toHaveLength(1);
});

test('a derived key’s record lives key.window: so does its Idempotency-Expires', async () => {
  const before = Date.now();
  const first = await postJson(`${proxy.url}/derived`, undefined, { d: 1 });
  const after = Date.now();
  expectWithin(first.headers['idempotency-expires'], before, after, WINDOW_MS);
  const retry = await postJson(`${proxy.url}/derived`, undefined, { d: 1 });
  expect(retry.headers['idempotency-expires']).toBe(first.headers['idempotency-expires']);
});

test('refusals and pass-through answers carry none: nothing was stored', async () => {
  const missing = await postJson(`${proxy.url}/refunds`, undefined, { a: 1 });
  expect(missing.status).toBe(400);
  expect(missing.headers['idempotency-expires']).toBeUndefined();
  await postJson(`${proxy.url}/refunds`, 'exp-2', { a: 1 });
  const reused = await postJson(`${proxy.url}/refunds`, 'exp-2', { a: 2 });
  expect(reused.status).toBe(422);
  expect(reused.headers['idempotency-expires']).toBeUndefined();
});

test('an unknown outcome stored under fail tells its expiry on the first answer and the replays', async () => {
  const first = await postJson(`${proxy.url}/drop`, 'exp-drop', {});
  expect(first.status).toBe(502);
  expect(first.headers['idempotency-outcome']).toBe('unknown');
  expect(first.headers['idempotency-expires']).toBeDefined();
  const replay = await postJson(`${proxy.url}/drop`, 'exp-drop', {});
  expect(replay.headers['idempotent-replayed']).toBe('true');
  expect(replay.headers['idempotency-expires']).toBe(first.headers['idempotency-expires']);
});

test('an answer too large to keep is streamed without it; its replays (no body) carry it', async () => {
  const first = await postJson(`${proxy.url}/big`, 'exp-big', {});
  expect(first.body.length).toBe(4096);
  expect(first.headers['idempotency-expires']).toBeUndefined();
  const replay = await postJson(`${proxy.url}/big`, 'exp-big', {});
  expect(replay.headers['idempotent-body-omitted']).toBe('true');
  expectWithin(replay.headers['idempotency-expires'], Date.now() - 60_000, Date.now(), TTL_MS);
});

test('MCP: the tool result and its replay carry the same Idempotency-Expires', async () => {
  const call = (id: number) =>
    Buffer.from(
      JSON.stringify({
        jsonrpc: '2.0',
        id,
        method: 'tools/call',
        params: { name: 'refund', arguments: { order: 'o-9' }, idempotencyKey: 'mcp-exp' },
      }),
    );
  const before = Date.now();
  const first = await postRawMcp(`${proxy.url}/mcp`, call(1));
  const after = Date.now();
  expectWithin(first.headers['idempotency-expires'], before, after, TTL_MS);
  const replay = await postRawMcp(`${proxy.url}/mcp`, call(2));
  expect(replay.headers['idempotent-replayed']).toBe('true');
  expect(expiresOf(replay.headers)).toBe(expiresOf(first.headers));
});
