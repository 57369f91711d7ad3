// What a client sees (README.md#what-a-client-sees-on-a-protected-route), the everyday rows: first
// request, replay, 409, 422, 400, 413, and what the upstream received.
import { eventually, until } from '../support/eventually';
import { send, postJson } from '../support/http';
import { startProxy, type TestProxy } from '../support/proxy';
import { sleep, startUpstream, type TestUpstream } from '../support/upstream';

let upstream: TestUpstream;
let proxy: TestProxy;
let slowMs = 0;

beforeAll(async () => {
  upstream = await startUpstream(async (req, res) => {
    if (req.url.includes('/slow')) await sleep(slowMs);
    const body = JSON.stringify({
      n: upstream.executions().length,
      echo: req.body.toString('utf8'),
    });
    res.writeHead(201, { 'content-type': 'application/json', 'x-upstream-says': 'hello' });
    res.end(body);
  });
  proxy = await startProxy({
    yaml: `
store: { table: "\${TEST_TABLE}" }
upstreams:
  api: { url: ${upstream.url}/v1, timeout: 5s }
defaults:
  maxRequestBytes: 1kb
routes:
  - name: orders
    match: { method: [POST, PUT], path: /orders }
    upstream: api
    idempotency: {}
  - name: slow
    match: { path: /slow }
    upstream: api
    idempotency: { lockTimeout: 30s }
  - name: optional
    match: { path: /optional }
    upstream: api
    idempotency: { key: { required: false } }
  - name: rest
    match: { path: /** }
    upstream: api
`,
  });
});

afterAll(async () => {
  await proxy?.close();
  await upstream?.close();
});

beforeEach(() => {
  upstream.received.length = 0;
});

describe('a protected route', () => {
  test('forwards the first request once, with the key, and returns the upstream response', async () => {
    const res = await postJson(`${proxy.url}/orders?x=1`, 'first-1', { item: 'book' });
    expect(res.status).toBe(201);
    expect(res.headers['x-upstream-says']).toBe('hello');
    expect(res.headers['idempotent-replayed']).toBeUndefined();
    expect(res.json()).toEqual({ n: 1, echo: '{"item":"book"}' });
    expect(upstream.executions()).toHaveLength(1);
    const seen = upstream.executions()[0]!;
    expect(seen.url).toBe('/v1/orders?x=1');
    expect(seen.headers['idempotency-key']).toBe('first-1');
    expect(seen.headers['x-forwarded-for']).toBe('127.0.0.1');
    expect(seen.headers['x-forwarded-proto']).toBe('http');
    expect(seen.headers['x-forwarded-host']).toBe(`127.0.0.1:${proxy.port}`);
    expect(seen.body.toString()).toBe('{"item":"book"}');
  });

  test('replays the stored status, headers and body for a repeated key without calling the upstream', async () => {
    const first = await postJson(`${proxy.url}/orders`, 'replay-1', { item: 'pen' });
    const second = await postJson(`${proxy.url}/orders`, 'replay-1', { item: 'pen' });
    const third = await postJson(`${proxy.url}/orders`, 'replay-1', { item: 'pen' });
    expect(upstream.executions()).toHaveLength(1);
    for (const replay of [second, third]) {
      expect(replay.status).toBe(first.status);
      expect(replay.body.equals(first.body)).toBe(true);
      expect(replay.headers['idempotent-replayed']).toBe('true');
      expect(replay.headers['x-upstream-says']).toBe('hello');
      expect(replay.headers['content-type']).toBe('application/json');
    }
    await proxy.flushCounters(); // repeats answered from the replay cache are counted in batches
    const { rows } = await proxy.pool.query(
      `SELECT attempts, replays, state FROM ${proxy.table} WHERE key = 'replay-1'`,
    );
    expect(rows).toEqual([{ attempts: 3, replays: 2, state: 'completed' }]);
  });

  test('accepts the key as an RFC 8941 string and treats it as the same key as the bare token', async () => {
    const first = await postJson(`${proxy.url}/orders`, '"sf-1"', { a: 1 });
    const second = await postJson(`${proxy.url}/orders`, 'sf-1', { a: 1 });
    expect(first.status).toBe(201);
    expect(second.headers['idempotent-replayed']).toBe('true');
    expect(upstream.executions()).toHaveLength(1);
    expect(upstream.executions()[0]!.headers['idempotency-key']).toBe('sf-1');
  });

  test('treats JSON bodies that differ only in key order and whitespace as the same request', async () => {
    await send(`${proxy.url}/orders`, {
      headers: { 'content-type': 'application/json', 'idempotency-key': 'canon-1' },
      body: '{"a":1,"b":{"c":2,"d":[1,2]}}',
    });
    const repeat = await send(`${proxy.url}/orders`, {
      headers: { 'content-type': 'application/json; charset=utf-8', 'idempotency-key': 'canon-1' },
      body: '{ "b": { "d": [1, 2], "c": 2.0 }, "a": 1 }',
    });
    expect(repeat.status).toBe(201);
    expect(repeat.headers['idempotent-replayed']).toBe('true');
    expect(upstream.executions()).toHaveLength(1);
  });

  test('hashes an invalid JSON body as bytes: the same bytes replay, other bytes are a mismatch', async () => {
    const broken = { 'content-type': 'application/json', 'idempotency-key': 'broken-json-1' };
    const first = await send(`${proxy.url}/orders`, { headers: broken, body: '{"a": 1,' });
    const same = await send(`${proxy.url}/orders`, { headers: broken, body: '{"a": 1,' });
    const other = await send(`${proxy.url}/orders`, { headers: broken, body: '{"a":  1,' });
    expect(first.status).toBe(201);
    expect(same.headers['idempotent-replayed']).toBe('true');
    expect(other.status).toBe(422);
    expect(upstream.executions()).toHaveLength(1);
  });

  test('answers 409 with Retry-After while the first request is in flight, then replays', async () => {
    slowMs = 700;
    const first = postJson(`${proxy.url}/slow`, 'inflight-1', { x: 1 });
    await until(() => upstream.received.length > 0, 'the first request to reach the upstream');
    const duplicate = await postJson(`${proxy.url}/slow`, 'inflight-1', { x: 1 });
    expect(duplicate.status).toBe(409);
    expect(duplicate.headers['content-type']).toBe('application/problem+json');
    const retryAfter = Number(duplicate.headers['retry-after']);
    expect(retryAfter).toBeGreaterThanOrEqual(29);
    expect(retryAfter).toBeLessThanOrEqual(30);
    expect(duplicate.json()).toMatchObject({
      status: 409,
      code: 'IDEMPOTENCY_KEY_IN_FLIGHT',
      route: 'slow',
      key: 'inflight-1',
      type: expect.stringContaining('idempotency-key-in-flight'),
      title: expect.any(String),
      detail: expect.stringContaining('Retry after'),
    });
    expect((await first).status).toBe(201);
    const after = await postJson(`${proxy.url}/slow`, 'inflight-1', { x: 1 });
    expect(after.headers['idempotent-replayed']).toBe('true');
    expect(upstream.executions()).toHaveLength(1);
    slowMs = 0;
  });

  test('answers 422 to a different payload under the same key and leaves the record intact', async () => {
    const original = await postJson(`${proxy.url}/orders`, 'mismatch-1', { amount: 10 });
    const changed = await postJson(`${proxy.url}/orders`, 'mismatch-1', { amount: 11 });
    expect(changed.status).toBe(422);
    expect(changed.json()).toMatchObject({
      code: 'IDEMPOTENCY_KEY_REUSED',
      key: 'mismatch-1',
      route: 'orders',
    });
    const otherMethod = await send(`${proxy.url}/orders`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json', 'idempotency-key': 'mismatch-1' },
      body: JSON.stringify({ amount: 10 }),
    });
    expect(otherMethod.status).toBe(422);
    const otherQuery = await postJson(`${proxy.url}/orders?page=2`, 'mismatch-1', { amount: 10 });
    expect(otherQuery.status).toBe(422);
    const corrected = await postJson(`${proxy.url}/orders`, 'mismatch-1', { amount: 10 });
    expect(corrected.status).toBe(201);
    expect(corrected.body.equals(original.body)).toBe(true);
    expect(upstream.executions()).toHaveLength(1);
  });

  test('answers 400 when the required key is missing, without calling the upstream', async () => {
    const res = await postJson(`${proxy.url}/orders`, undefined, { a: 1 });
    expect(res.status).toBe(400);
    expect(res.headers['content-type']).toBe('application/problem+json');
    expect(res.json()).toMatchObject({
      code: 'IDEMPOTENCY_KEY_MISSING',
      status: 400,
      route: 'orders',
    });
    expect(upstream.received).toHaveLength(0);
  });

  test.each([
    ['empty', ''],
    ['empty quoted', '""'],
    ['256 characters', 'k'.repeat(256)],
    ['a space', 'a b'],
    ['non-ASCII', 'clé'],
    ['an unterminated quote', '"abc'],
  ])('answers 400 to a key that is %s, without calling the upstream', async (_name, key) => {
    const res = await send(`${proxy.url}/orders`, {
      headers: {
        'content-type': 'application/json',
        'idempotency-key': Buffer.from(key, 'utf8').toString('latin1'),
      },
      body: '{}',
    });
    expect(res.status).toBe(400);
    expect(res.json()).toMatchObject({ code: 'IDEMPOTENCY_KEY_INVALID' });
    expect(upstream.received).toHaveLength(0);
  });

  test('accepts a key of exactly 255 characters', async () => {
    const res = await postJson(`${proxy.url}/orders`, 'k'.repeat(255), {});
    expect(res.status).toBe(201);
    expect(upstream.executions()).toHaveLength(1);
  });

  test('answers 400 to a key sent twice', async () => {
    const res = await send(`${proxy.url}/orders`, {
      headers: { 'content-type': 'application/json', 'idempotency-key': ['twice-a', 'twice-b'] },
      body: '{}',
    });
    expect(res.status).toBe(400);
    expect(res.json()).toMatchObject({ code: 'IDEMPOTENCY_KEY_INVALID' });
    expect(res.json<{ detail: string }>().detail).toContain('sent 2 times');
    expect(upstream.received).toHaveLength(0);
  });

  test('accepts a key with a comma in it, sent once', async () => {
    const res = await postJson(`${proxy.url}/orders`, 'order-1,step-2', {});
    expect(res.status).toBe(201);
    expect(upstream.executions()[0]!.headers['idempotency-key']).toBe('order-1,step-2');
  });

  test('answers 413 to a body over maxRequestBytes, declared or chunked, without calling the upstream', async () => {
    const big = 'x'.repeat(1025);
    const declared = await send(`${proxy.url}/orders`, {
      headers: { 'idempotency-key': 'big-1' },
      body: big,
    });
    expect(declared.status).toBe(413);
    expect(declared.json()).toMatchObject({ code: 'REQUEST_TOO_LARGE', key: 'big-1' });
    const chunked = await send(`${proxy.url}/orders`, {
      headers: { 'idempotency-key': 'big-2' },
      body: big,
      chunked: true,
    });
    expect(chunked.status).toBe(413);
    expect(upstream.received).toHaveLength(0);
    // Nothing was claimed: the same key with an acceptable body executes.
    const fine = await send(`${proxy.url}/orders`, {
      headers: { 'idempotency-key': 'big-1' },
      body: 'x'.repeat(1024),
    });
    expect(fine.status).toBe(201);
  });

  test('forwards requests without a key unprotected when the key is optional', async () => {
    const a = await postJson(`${proxy.url}/optional`, undefined, { a: 1 });
    const b = await postJson(`${proxy.url}/optional`, undefined, { a: 1 });
    expect([a.status, b.status]).toEqual([201, 201]);
    expect(upstream.executions()).toHaveLength(2);
    expect(b.headers['idempotent-replayed']).toBeUndefined();
    const keyed = await postJson(`${proxy.url}/optional`, 'optional-1', { a: 1 });
    const keyedAgain = await postJson(`${proxy.url}/optional`, 'optional-1', { a: 1 });
    expect(keyed.status).toBe(201);
    expect(keyedAgain.headers['idempotent-replayed']).toBe('true');
    expect(upstream.executions()).toHaveLength(3);
  });

  test('lets safe methods on a protected route pass through, ignoring their key', async () => {
    const a = await send(`${proxy.url}/slow`, {
      method: 'GET',
      headers: { 'idempotency-key': 'get-1' },
    });
    const b = await send(`${proxy.url}/slow`, {
      method: 'GET',
      headers: { 'idempotency-key': 'get-1' },
    });
    expect([a.status, b.status]).toEqual([201, 201]);
    expect(upstream.received.filter((r) => r.method === 'GET')).toHaveLength(2);
    expect(b.headers['idempotent-replayed']).toBeUndefined();
  });

  test('writes one log line per request with route, key, outcome and timings', async () => {
    proxy.logs.length = 0;
    await postJson(`${proxy.url}/orders`, 'log-1', { a: 1 });
    await postJson(`${proxy.url}/orders`, 'log-1', { a: 1 });
    // A line is written just after its response ends.
    const lines = await eventually(() => {
      const written = proxy.logs.filter((line) => line.msg === 'request');
      expect(written.map((l) => [l.route, l.key, l.outcome, l.status, l.attempts])).toEqual([
        ['orders', 'log-1', 'executed', 201, 1],
        ['orders', 'log-1', 'replayed', 201, 2],
      ]);
      return written;
    });
    expect(typeof lines[0]!.storeMs).toBe('number');
    expect(typeof lines[0]!.upstreamMs).toBe('number');
    expect(typeof lines[0]!.totalMs).toBe('number');
  });
});

describe('control characters in keys', () => {
  test.each([
    ['a tab', 'key\twith-tab'],
    ['DEL', 'key\x7fdel'],
    ['a NUL', 'key\x00nul'],
  ])('a key with %s gets 400 and never reaches the upstream', async (_name, key) => {
    const net = await import('node:net');
    const raw =
      `POST /orders HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n` +
      `Idempotency-Key: ${key}\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}`;
    const response = await new Promise<string>((resolve, reject) => {
      const socket = net.connect(proxy.port, '127.0.0.1', () =>
        socket.write(Buffer.from(raw, 'latin1')),
      );
      let text = '';
      socket.on('data', (data: Buffer) => (text += data.toString('latin1')));
      socket.on('end', () => resolve(text));
      socket.on('error', reject);
    });
    expect(response).toMatch(/^HTTP\/1\.1 400 /);
    expect(response.toLowerCase()).toContain('content-type: application/problem+json');
    expect(response).toMatch(/"code":"(IDEMPOTENCY_KEY_INVALID|BAD_REQUEST)"/);
    expect(upstream.received).toHaveLength(0);
  });
});
