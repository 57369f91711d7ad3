// Derived keys (`key.derive`, `key.window`: config/README.md): a request without a key
// header on a route with `derive` is keyed by a hash of the named parts, scoped like any key, and
// deduplicated for `window`. Asserts the client's answer, what the upstream received, the log line
// and the stored record.
import { createHash } from 'node:crypto';
import { deriveKey } from '../../src/idempotency/derived-key';
import { until } from '../support/eventually';
import { postJson, send, type TestResponse } from '../support/http';
import { startProxy, type TestProxy } from '../support/proxy';
import { sleep, startUpstream, type TestUpstream } from '../support/upstream';

let upstream: TestUpstream;
let proxy: TestProxy;

const DERIVED = /^derived:[A-Za-z0-9_-]{43}$/;

beforeAll(async () => {
  upstream = await startUpstream((req, res) => {
    res.writeHead(201, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ execution: upstream.executions().length, url: req.url }));
  });
  proxy = await startProxy({
    yaml: `
store:
  table: \${TEST_TABLE}
upstreams:
  api: { url: ${upstream.url}, timeout: 5s }
routes:
  - name: emails
    match: { method: POST, path: /emails }
    upstream: api
    idempotency:
      key: { required: false, derive: [body], window: 1s }
      fingerprint: { ignore: [body.sent_at, body.meta.trace_id] }
  - name: by-order
    match: { method: POST, path: /by-order }
    upstream: api
    idempotency:
      key: { derive: [body.order.id], window: 1m }
  - name: by-run
    match: { method: POST, path: /by-run }
    upstream: api
    idempotency:
      key: { derive: ["header:x-run-id", query.x], window: 1m }
      fingerprint: { parts: [method, path] }
  - name: tenanted
    match: { method: POST, path: /tenanted }
    upstream: api
    idempotency:
      tenant: [header:authorization]
      key: { derive: [body], window: 1m }
  - name: no-forward
    match: { method: POST, path: /no-forward }
    upstream: api
    idempotency: { key: { derive: [body] }, forwardKeyAs: false, ttl: 2h }
`,
  });
});

afterAll(async () => {
  await proxy?.close();
  await upstream?.close();
});

beforeEach(() => {
  upstream.received.length = 0;
  proxy.logs.length = 0;
});

/** The request log lines written so far (a line is written just after its response ends). */
async function requestLines(count: number): Promise<Record<string, unknown>[]> {
  const lines = () => proxy.logs.filter((line) => line.msg === 'request');
  // After 1 s, the lines there are: the caller's assertion reports what is missing.
  await until(() => lines().length >= count, `${count} request log lines`, {
    timeoutMs: 1_000,
  }).catch(() => undefined);
  return lines();
}

function expectReplayOfDerived(replay: TestResponse, first: TestResponse): void {
  expect(replay.status).toBe(first.status);
  expect(replay.body.equals(first.body)).toBe(true);
  expect(replay.headers['idempotent-replayed']).toBe('true');
  expect(replay.headers['idempotency-key-derived']).toBe('true');
}

describe('a route with key.derive', () => {
  test('runs identical keyless payloads once inside the window and marks the replay as derived', async () => {
    const email = { to: 'ada@example.com', subject: 'Welcome' };
    const first = await postJson(`${proxy.url}/emails`, undefined, email);
    const second = await postJson(`${proxy.url}/emails`, undefined, email);
    expect(first.status).toBe(201);
    expect(first.headers['idempotent-replayed']).toBeUndefined();
    expect(first.headers['idempotency-key-derived']).toBeUndefined();
    expectReplayOfDerived(second, first);
    expect(upstream.executions()).toHaveLength(1);

    // The upstream received the derived key, so an upstream that dedupes on it benefits too.
    const forwarded = upstream.executions()[0]!.headers['idempotency-key'];
    expect(forwarded).toMatch(DERIVED);

    const lines = await requestLines(2);
    expect(lines.map((l) => [l.route, l.key, l.keyDerived, l.outcome])).toEqual([
      ['emails', forwarded, true, 'executed'],
      ['emails', forwarded, true, 'replayed'],
    ]);
  });

  test('derives the key documented in derived-key.ts: "derived:" + base64url SHA-256 of the parts', async () => {
    const body = '{"to":"key@example.com"}';
    await send(`${proxy.url}/emails`, { headers: { 'content-type': 'application/json' }, body });
    const expected = deriveKey(
      [{ kind: 'body' }],
      {
        method: 'POST',
        path: '/emails',
        query: '',
        headers: {},
        body: Buffer.from(body),
        contentType: 'application/json',
      },
      [['sent_at'], ['meta', 'trace_id']],
    );
    expect(upstream.executions()[0]!.headers['idempotency-key']).toBe(expected);
    // Hashed, never the payload itself: nothing of the body shows in the key.
    expect(expected).not.toContain('key@example');
    expect(createHash('sha256').update(body).digest('base64url')).not.toBe(expected.slice(8));
  });

  test('runs the same payload again once the window has passed', async () => {
    const email = { to: 'window@example.com', subject: 'Reminder' };
    const first = await postJson(`${proxy.url}/emails`, undefined, email);
    const inside = await postJson(`${proxy.url}/emails`, undefined, email);
    expectReplayOfDerived(inside, first);

    // The record lives for the window (1 s), not the ttl (24 h).
    const key = String(upstream.executions()[0]!.headers['idempotency-key']);
    const { rows } = await proxy.pool.query<{ lifetime_ms: number }>(
      `SELECT (extract(epoch FROM expires_at - completed_at) * 1000)::int AS lifetime_ms
         FROM ${proxy.table} WHERE key = $1::text`,
      [key],
    );
    expect(rows).toEqual([{ lifetime_ms: 1_000 }]);

    await sleep(1_200); // past the 1 s lifetime
    const after = await postJson(`${proxy.url}/emails`, undefined, email);
    expect(after.status).toBe(201);
    expect(after.headers['idempotent-replayed']).toBeUndefined();
    expect(after.json()).not.toEqual(first.json());
    expect(upstream.executions()).toHaveLength(2);
    expect(upstream.executions()[1]!.headers['idempotency-key']).toBe(key);
  });

  test('runs different payloads separately, each with its own derived key', async () => {
    const a = await postJson(`${proxy.url}/emails`, undefined, { to: 'a@example.com' });
    const b = await postJson(`${proxy.url}/emails`, undefined, { to: 'b@example.com' });
    const c = await postJson(`${proxy.url}/emails`, undefined, { to: 'a@example.com', cc: [] });
    expect([a.status, b.status, c.status]).toEqual([201, 201, 201]);
    expect([a, b, c].map((r) => r.headers['idempotent-replayed'])).toEqual([
      undefined,
      undefined,
      undefined,
    ]);
    const keys = upstream.executions().map((r) => r.headers['idempotency-key']);
    expect(new Set(keys).size).toBe(3);
  });

  test('treats JSON that differs only in key order, whitespace, escapes and number spelling as identical', async () => {
    const headers = { 'content-type': 'application/json' };
    const first = await send(`${proxy.url}/emails`, {
      headers,
      body: '{"to":"canon@example.com","amount":1,"tags":["A"]}',
    });
    const same = await send(`${proxy.url}/emails`, {
      headers,
      body: '{ "tags": ["\\u0041"], "amount": 1.0e0, "to": "canon@example.com" }',
    });
    expectReplayOfDerived(same, first);
    expect(upstream.executions()).toHaveLength(1);
  });

  test('applies fingerprint.ignore to the derived key: a change in an ignored field dedupes, any other does not', async () => {
    const base = {
      to: 'ignore@example.com',
      sent_at: '2025-01-01T00:00:00Z',
      meta: { trace_id: 't1', lang: 'en' },
    };
    const first = await postJson(`${proxy.url}/emails`, undefined, base);
    const retried = await postJson(`${proxy.url}/emails`, undefined, {
      ...base,
      sent_at: '2025-01-01T00:00:07Z',
      meta: { trace_id: 't2', lang: 'en' },
    });
    const noTimestamp = await postJson(`${proxy.url}/emails`, undefined, {
      to: base.to,
      meta: { lang: 'en' },
    });
    expectReplayOfDerived(retried, first);
    expectReplayOfDerived(noTimestamp, first);
    expect(upstream.executions()).toHaveLength(1);

    const otherLang = await postJson(`${proxy.url}/emails`, undefined, {
      ...base,
      meta: { trace_id: 't1', lang: 'fr' },
    });
    expect(otherLang.status).toBe(201);
    expect(otherLang.headers['idempotent-replayed']).toBeUndefined();
    expect(upstream.executions()).toHaveLength(2);
  });

  test('still answers 400 to a key that is present but invalid, and forwards nothing', async () => {
    for (const key of ['', 'has space', 'x'.repeat(256)]) {
      const res = await postJson(`${proxy.url}/emails`, key, { to: 'invalid@example.com' });
      expect(res.status).toBe(400);
      expect(res.json()).toMatchObject({ code: 'IDEMPOTENCY_KEY_INVALID', route: 'emails' });
    }
    expect(upstream.executions()).toHaveLength(0);
  });

  test('uses a key that is sent as it is, without deriving one', async () => {
    const first = await postJson(`${proxy.url}/emails`, 'client-key-1', { to: 'sent@example.com' });
    const keyless = await postJson(`${proxy.url}/emails`, undefined, { to: 'sent@example.com' });
    expect(first.status).toBe(201);
    expect(keyless.headers['idempotent-replayed']).toBeUndefined(); // another key: runs again
    const repeat = await postJson(`${proxy.url}/emails`, 'client-key-1', {
      to: 'sent@example.com',
    });
    expect(repeat.headers['idempotent-replayed']).toBe('true');
    expect(repeat.headers['idempotency-key-derived']).toBeUndefined();
    const keys = upstream.executions().map((r) => r.headers['idempotency-key']);
    expect(keys[0]).toBe('client-key-1');
    expect(keys[1]).toMatch(DERIVED);
    const lines = await requestLines(3);
    expect(lines.map((l) => l.keyDerived)).toEqual([undefined, true, undefined]);
  });
});

describe('derive parts', () => {
  test('body.<field>: the same field value is the same key, even when the key is required', async () => {
    const first = await postJson(`${proxy.url}/by-order`, undefined, {
      order: { id: 'ord_1', note: 'x' },
      amount: 5,
    });
    const same = await postJson(`${proxy.url}/by-order`, undefined, {
      amount: 5,
      order: { note: 'x', id: 'ord_1' },
    });
    const otherOrder = await postJson(`${proxy.url}/by-order`, undefined, {
      order: { id: 'ord_2', note: 'x' },
      amount: 5,
    });
    expect(first.status).toBe(201);
    expectReplayOfDerived(same, first);
    expect(otherOrder.headers['idempotent-replayed']).toBeUndefined();
    expect(upstream.executions()).toHaveLength(2);

    // Same order id, different rest of the body: same key, different fingerprint → 422, as with
    // a sent key reused for another request. The stored record stays as it was.
    const changed = await postJson(`${proxy.url}/by-order`, undefined, {
      order: { id: 'ord_1', note: 'x' },
      amount: 500,
    });
    expect(changed.status).toBe(422);
    expect(changed.json()).toMatchObject({ code: 'IDEMPOTENCY_KEY_REUSED' });
    expect(changed.json<{ key: string }>().key).toMatch(DERIVED);
    expect(upstream.executions()).toHaveLength(2);
  });

  test('header:<name> and query.<name>: requests agreeing on both are one request', async () => {
    const run = (id: string | undefined, x: string, body: unknown) =>
      postJson(`${proxy.url}/by-run?x=${x}&other=${Math.random()}`, undefined, body, {
        ...(id === undefined ? {} : { 'x-run-id': id }),
      });
    const first = await run('run-1', '1', { step: 1 });
    // Other body and another (unlisted) query parameter: neither is a derive part nor in the
    // fingerprint (method, path), so this is the same request.
    const same = await run('run-1', '1', { step: 'whatever' });
    expectReplayOfDerived(same, first);
    expect((await run('run-2', '1', {})).headers['idempotent-replayed']).toBeUndefined();
    expect((await run('run-1', '2', {})).headers['idempotent-replayed']).toBeUndefined();
    // A missing header is a value of its own: it differs from every sent one, and equals itself.
    const absent = await run(undefined, '1', {});
    expect(absent.headers['idempotent-replayed']).toBeUndefined();
    expectReplayOfDerived(await run(undefined, '1', {}), absent);
    expect(upstream.executions()).toHaveLength(4);
  });
});

describe('scope', () => {
  test('scopes a derived key per tenant, like any key', async () => {
    const body = { to: 'tenant@example.com' };
    const alice = await postJson(`${proxy.url}/tenanted`, undefined, body, {
      authorization: 'Bearer alice',
    });
    const bob = await postJson(`${proxy.url}/tenanted`, undefined, body, {
      authorization: 'Bearer bob',
    });
    const aliceAgain = await postJson(`${proxy.url}/tenanted`, undefined, body, {
      authorization: 'Bearer alice',
    });
    expect(alice.status).toBe(201);
    expect(bob.headers['idempotent-replayed']).toBeUndefined();
    expectReplayOfDerived(aliceAgain, alice);
    expect(upstream.executions()).toHaveLength(2);
    // The same derived key, once per tenant: the tenant is in the scope, not in the key.
    const keys = upstream.executions().map((r) => r.headers['idempotency-key']);
    expect(keys[0]).toBe(keys[1]);
    const { rows } = await proxy.pool.query(
      `SELECT count(DISTINCT tenant)::int AS tenants FROM ${proxy.table} WHERE scope = 'tenanted'`,
    );
    expect(rows).toEqual([{ tenants: 2 }]);
  });

  test('keeps a derived key apart from the same payload on another route', async () => {
    const body = { to: 'routes@example.com' };
    await postJson(`${proxy.url}/tenanted`, undefined, body, { authorization: 'Bearer carol' });
    const other = await postJson(`${proxy.url}/no-forward`, undefined, body);
    expect(other.headers['idempotent-replayed']).toBeUndefined();
    expect(upstream.executions()).toHaveLength(2);
  });
});

describe('forwarding and lifetime', () => {
  test('forwardKeyAs: false sends no key upstream, derived or not', async () => {
    const first = await postJson(`${proxy.url}/no-forward`, undefined, { n: 1 });
    const replay = await postJson(`${proxy.url}/no-forward`, undefined, { n: 1 });
    expectReplayOfDerived(replay, first);
    expect(upstream.executions()).toHaveLength(1);
    expect(upstream.executions()[0]!.headers['idempotency-key']).toBeUndefined();
  });

  test('without key.window a derived key lives for the ttl', async () => {
    await postJson(`${proxy.url}/no-forward`, undefined, { n: 'ttl' });
    const { rows } = await proxy.pool.query<{ lifetime_ms: number }>(
      `SELECT (extract(epoch FROM expires_at - completed_at) * 1000)::int AS lifetime_ms
         FROM ${proxy.table} WHERE scope = 'no-forward' ORDER BY completed_at DESC LIMIT 1`,
    );
    expect(rows).toEqual([{ lifetime_ms: 2 * 3_600_000 }]);
  });
});
