// Big bodies must not stall the event loop: a repeat of a large body whose exact bytes
// the proxy has seen for that record is answered from its raw fingerprint (a SHA-256 of the bytes),
// without canonicalising the JSON again; other spellings still go through canonical JSON.
import { ChunkedBody } from '../../src/http/body';
import * as canonicalJson from '../../src/idempotency/canonical-json';
import { until } from '../support/eventually';
import { postJson, send } from '../support/http';
import { startProxy, type TestProxy } from '../support/proxy';
import { sleep, startUpstream, type TestUpstream } from '../support/upstream';

let upstream: TestUpstream;
let proxy: TestProxy;

beforeAll(async () => {
  upstream = await startUpstream(async (req, res) => {
    if (req.headers['x-wait']) await sleep(Number(req.headers['x-wait']));
    res.writeHead(201, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ bytes: req.body.length }));
  });
  proxy = await startProxy({
    yaml: `
store: { table: "\${TEST_TABLE}" }
upstreams: { api: { url: ${upstream.url} } }
routes:
  - { name: bulk, match: { path: /bulk }, upstream: api, idempotency: { maxRequestBytes: 4mb } }
  - name: bulk-wait
    match: { path: /bulk-wait }
    upstream: api
    idempotency: { maxRequestBytes: 4mb, onConcurrent: wait }
`,
  });
});

afterAll(async () => {
  await proxy?.close();
  await upstream?.close();
});

afterEach(() => jest.restoreAllMocks());

/** About a megabyte of JSON numbers, as in the incident. */
function bigArray(seed: number): number[] {
  return Array.from({ length: 150_000 }, (_, i) => (i * 7919 + seed) % 1_000_003);
}

function post(path: string, key: string, body: string, headers: Record<string, string> = {}) {
  return send(`${proxy.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key, ...headers },
    body,
  });
}

test('a repeat of the same bytes is replayed without canonicalising the body again', async () => {
  const body = JSON.stringify(bigArray(1));
  expect(body.length).toBeGreaterThan(900_000);
  const canonicalize = jest.spyOn(canonicalJson, 'canonicalize');
  expect((await post('/bulk', 'big-1', body)).status).toBe(201);
  // The first repeat claims (the store needs the canonical fingerprint) and admits the record.
  expect((await post('/bulk', 'big-1', body)).headers['idempotent-replayed']).toBe('true');
  const before = canonicalize.mock.calls.length;
  const repeats = await Promise.all(Array.from({ length: 20 }, () => post('/bulk', 'big-1', body)));
  expect(repeats.every((r) => r.headers['idempotent-replayed'] === 'true')).toBe(true);
  expect(canonicalize.mock.calls.length).toBe(before);
  expect(upstream.executions()).toHaveLength(1);
});

test('another spelling of the same JSON is still a replay, another document still a 422', async () => {
  const value = bigArray(2);
  expect((await post('/bulk', 'big-2', JSON.stringify(value))).status).toBe(201);
  const spaced = await post('/bulk', 'big-2', JSON.stringify(value, null, 1));
  expect(spaced.status).toBe(201);
  expect(spaced.headers['idempotent-replayed']).toBe('true');
  const other = await post('/bulk', 'big-2', JSON.stringify(bigArray(3)));
  expect(other.status).toBe(422);
  expect(upstream.executions().filter((r) => r.url === '/bulk')).toHaveLength(2);
});

test('the same bytes under another content type are not taken for the JSON body', async () => {
  const body = JSON.stringify(bigArray(4));
  expect((await post('/bulk', 'big-4', body)).status).toBe(201);
  await post('/bulk', 'big-4', body); // admitted to the replay cache with its raw fingerprint
  const asText = await post('/bulk', 'big-4', body, { 'content-type': 'text/plain' });
  expect(asText.status).toBe(422);
});

test('repeats of a large body in flight join the first request by its bytes', async () => {
  const body = JSON.stringify(bigArray(5));
  const first = post('/bulk-wait', 'big-5', body, { 'x-wait': '800' });
  await until(
    () => upstream.received.some((r) => r.headers['idempotency-key'] === 'big-5'),
    'the first request to arrive',
    { intervalMs: 10 },
  );
  const canonicalize = jest.spyOn(canonicalJson, 'canonicalize');
  const repeats = await Promise.all(
    Array.from({ length: 5 }, () => post('/bulk-wait', 'big-5', body)),
  );
  expect((await first).status).toBe(201);
  expect(repeats.map((r) => r.headers['idempotent-replayed'])).toEqual(Array(5).fill('true'));
  expect(canonicalize).not.toHaveBeenCalled();
  expect(proxy.logs.filter((l) => l.key === 'big-5' && l.coalesced === true)).toHaveLength(5);
});

test('a small body takes the canonical path as before', async () => {
  expect((await postJson(`${proxy.url}/bulk`, 'small-1', { a: 1, b: 2 })).status).toBe(201);
  const again = await postJson(`${proxy.url}/bulk`, 'small-1', { b: 2, a: 1 });
  expect(again.headers['idempotent-replayed']).toBe('true');
});

test('a repeat answered by its digest frees its chunks unjoined; a new one joins and forwards them', async () => {
  const body = JSON.stringify(bigArray(6));
  expect((await post('/bulk', 'big-6', body)).status).toBe(201);
  await post('/bulk', 'big-6', body); // admitted to the replay cache with its raw fingerprint
  const joined = jest.spyOn(ChunkedBody.prototype, 'body');
  const released = jest.spyOn(ChunkedBody.prototype, 'release');
  const repeats = await Promise.all(Array.from({ length: 5 }, () => post('/bulk', 'big-6', body)));
  expect(repeats.map((r) => r.headers['idempotent-replayed'])).toEqual(Array(5).fill('true'));
  expect(joined).not.toHaveBeenCalled();
  expect(released).toHaveBeenCalledTimes(5);
  // A new key needs the body whole: joined once, forwarded exactly as sent.
  joined.mockClear();
  const fresh = await post('/bulk', 'big-6b', body);
  expect(fresh.status).toBe(201);
  expect(JSON.parse(fresh.body.toString())).toEqual({ bytes: Buffer.byteLength(body) });
  expect(joined).toHaveBeenCalled();
  expect(
    upstream
      .executions()
      .filter((r) => r.url === '/bulk')
      .at(-1)
      ?.body.toString(),
  ).toBe(body);
});
