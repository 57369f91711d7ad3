// Keys sent inside the body (key.body, an RFC 6901 pointer): a request field on REST routes, a
// member of the JSON-RPC message on MCP routes (UCP's arguments.meta["idempotency-key"], ACP's
// _meta.idempotency_key). The key field stays in the fingerprint, so a reused key with changed
// arguments is refused; a missing or invalid key is refused 400 and never forwarded.
import { postJson, send } from '../support/http';
import { postRawMcp } from '../support/mcp-raw-post';
import { startProxy, type TestProxy } from '../support/proxy';
import { startUpstream, type TestUpstream } from '../support/upstream';

let upstream: TestUpstream;
let proxy: TestProxy;

beforeAll(async () => {
  // Answers REST calls with 201, and JSON-RPC tools/call messages with a JSON result under their id.
  upstream = await startUpstream((req, res) => {
    const n = upstream.executions().length;
    if (req.url === '/mcp') {
      const { id } = JSON.parse(req.body.toString()) as { id: unknown };
      const result = { content: [{ type: 'text', text: `refund ${n}` }] };
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ jsonrpc: '2.0', id, result }));
      return;
    }
    res.writeHead(201, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ refund: n }));
  });
  proxy = await startProxy({
    yaml: `
store:
  table: \${TEST_TABLE}
upstreams: { api: { url: ${upstream.url} } }
routes:
  - name: payments
    match: { path: /payments }
    upstream: api
    idempotency: { key: { body: /idempotency_key } }
  - name: optional
    match: { path: /optional }
    upstream: api
    idempotency: { key: { body: /meta/idempotency~1key, required: false } }
  - name: acp
    match: { path: /acp }
    upstream: api
    idempotency: { key: { body: /params/_meta/idempotency_key }, mcp: { tools: [refund] } }
  - name: ucp
    match: { path: /mcp }
    upstream: api
    idempotency: { key: { body: /params/arguments/meta/idempotency-key }, mcp: { tools: [refund] } }
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

describe('REST', () => {
  test('a key in the body replays its answer; the same key with another amount is 422, the first ran once', async () => {
    const body = { idempotency_key: 'pay-1', amount: 100 };
    const first = await postJson(`${proxy.url}/payments`, undefined, body);
    const retry = await postJson(`${proxy.url}/payments`, undefined, body);
    expect(first.status).toBe(201);
    expect(retry.headers['idempotent-replayed']).toBe('true');
    expect(retry.text()).toBe(first.text());
    const changed = await postJson(`${proxy.url}/payments`, undefined, { ...body, amount: 5 });
    expect(changed.status).toBe(422);
    expect(changed.json()).toMatchObject({ code: 'IDEMPOTENCY_KEY_REUSED', key: 'pay-1' });
    expect(upstream.executions()).toHaveLength(1);
    // The upstream gets the key as the header too (forwardKeyAs), and the body unchanged.
    expect(upstream.executions()[0]!.headers['idempotency-key']).toBe('pay-1');
    expect(JSON.parse(upstream.executions()[0]!.body.toString())).toEqual(body);
  });

  test('the key field is part of the fingerprint: the same header key with another body key is 422', async () => {
    await postJson(`${proxy.url}/payments`, 'hdr-1', { idempotency_key: 'a', amount: 1 });
    const other = await postJson(`${proxy.url}/payments`, 'hdr-1', {
      idempotency_key: 'b',
      amount: 1,
    });
    expect(other.status).toBe(422);
    expect(upstream.executions()).toHaveLength(1);
  });

  test('a key header wins over the body: the body key is not the record’s key then', async () => {
    const body = { idempotency_key: 'in-body', amount: 2 };
    await postJson(`${proxy.url}/payments`, 'in-header', body);
    const byBody = await postJson(`${proxy.url}/payments`, undefined, body);
    expect(byBody.headers['idempotent-replayed']).toBeUndefined();
    expect(upstream.executions().map((r) => r.headers['idempotency-key'])).toEqual([
      'in-header',
      'in-body',
    ]);
  });

  test.each([
    ['no key anywhere', { amount: 1 }, 'IDEMPOTENCY_KEY_MISSING', /at \/idempotency_key/],
    ['a number', { idempotency_key: 42 }, 'IDEMPOTENCY_KEY_INVALID', /must be a string/],
    ['an empty key', { idempotency_key: '' }, 'IDEMPOTENCY_KEY_INVALID', /empty key/],
    ['a space inside', { idempotency_key: 'a b' }, 'IDEMPOTENCY_KEY_INVALID', /U\+0020/],
    ['256 characters', { idempotency_key: 'k'.repeat(256) }, 'IDEMPOTENCY_KEY_INVALID', /256/],
  ])('%s: 400 problem+json, nothing forwarded', async (_, body, code, detail) => {
    const answer = await postJson(`${proxy.url}/payments`, undefined, body);
    expect(answer.status).toBe(400);
    expect(answer.headers['content-type']).toBe('application/problem+json');
    expect(answer.json()).toMatchObject({ code, route: 'payments' });
    expect(answer.json<{ detail: string }>().detail).toMatch(detail);
    expect(upstream.received).toHaveLength(0);
  });

  test('a body that is not JSON has no body key: 400 missing', async () => {
    const answer = await send(`${proxy.url}/payments`, { body: 'idempotency_key=pay-9' });
    expect(answer.json()).toMatchObject({ code: 'IDEMPOTENCY_KEY_MISSING' });
    expect(upstream.received).toHaveLength(0);
  });

  test('a JSON object with the key twice is refused: parsers disagree on which one counts', async () => {
    const answer = await send(`${proxy.url}/payments`, {
      headers: { 'content-type': 'application/json' },
      body: '{"idempotency_key":"a","idempotency_key":"b"}',
    });
    expect(answer.status).toBe(400);
    expect(answer.json()).toMatchObject({ code: 'JSON_DUPLICATE_KEY' });
    expect(upstream.received).toHaveLength(0);
  });

  test('escaped pointer tokens reach the member (~1 is "/"); without a required key the request is forwarded', async () => {
    const body = { meta: { 'idempotency/key': 'opt-1' }, n: 1 };
    await postJson(`${proxy.url}/optional`, undefined, body);
    const retry = await postJson(`${proxy.url}/optional`, undefined, body);
    expect(retry.headers['idempotent-replayed']).toBe('true');
    const keyless = await postJson(`${proxy.url}/optional`, undefined, { n: 2 });
    expect(keyless.status).toBe(201);
    expect(upstream.executions()).toHaveLength(2);
  });
});

describe('MCP', () => {
  const callOf = (id: number, args: Record<string, unknown>, meta?: Record<string, unknown>) =>
    Buffer.from(
      JSON.stringify({
        jsonrpc: '2.0',
        id,
        method: 'tools/call',
        params: { name: 'refund', arguments: args, ...(meta ? { _meta: meta } : {}) },
      }),
    );

  test('UCP: arguments.meta["idempotency-key"] keys the call; changed arguments under it are 422', async () => {
    const args = { order: 'o-1', amount: 10, meta: { 'idempotency-key': 'ucp-1' } };
    const first = await postRawMcp(`${proxy.url}/mcp`, callOf(1, args));
    const retry = await postRawMcp(`${proxy.url}/mcp`, callOf(2, args));
    expect(first.json).toMatchObject({ id: 1, result: { content: [{ text: 'refund 1' }] } });
    expect(retry.json).toMatchObject({ id: 2, result: { content: [{ text: 'refund 1' }] } });
    expect(retry.headers['idempotent-replayed']).toBe('true');
    const changed = await postRawMcp(`${proxy.url}/mcp`, callOf(3, { ...args, amount: 99 }));
    expect(changed.json).toMatchObject({
      id: 3,
      error: { code: 422, data: { type: 'idempotency_key_conflict' } },
    });
    expect(upstream.executions()).toHaveLength(1);
    expect(upstream.executions()[0]!.headers['idempotency-key']).toBe('ucp-1');
  });

  test('UCP: a call without the key is refused (400, idempotency_key_missing) and not forwarded', async () => {
    const answer = await postRawMcp(`${proxy.url}/mcp`, callOf(4, { order: 'o-2' }));
    expect(answer.status).toBe(200);
    expect(answer.json).toMatchObject({
      id: 4,
      error: {
        code: 400,
        data: { type: 'idempotency_key_missing', code: 'IDEMPOTENCY_KEY_MISSING' },
      },
    });
    const invalid = await postRawMcp(
      `${proxy.url}/mcp`,
      callOf(5, { order: 'o-2', meta: { 'idempotency-key': 7 } }),
    );
    expect(invalid.json).toMatchObject({
      id: 5,
      error: { code: 400, data: { type: 'idempotency_key_invalid' } },
    });
    expect(upstream.received).toHaveLength(0);
  });

  test('ACP: _meta.idempotency_key keys the call, though _meta is never part of a derived key', async () => {
    const args = { order: 'o-3' };
    await postRawMcp(`${proxy.url}/acp`, callOf(1, args, { idempotency_key: 'acp-1' }));
    const retry = await postRawMcp(
      `${proxy.url}/acp`,
      callOf(2, args, { idempotency_key: 'acp-1' }),
    );
    expect(retry.headers['idempotent-replayed']).toBe('true');
    const another = await postRawMcp(
      `${proxy.url}/acp`,
      callOf(3, args, { idempotency_key: 'acp-2' }),
    );
    expect(another.headers['idempotent-replayed']).toBeUndefined();
    expect(upstream.executions()).toHaveLength(2);
  });
});
