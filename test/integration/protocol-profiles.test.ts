// `idempotency.profile: acp | ucp` (docs/protocol-profiles.md): each rule of each profile's table
// is one test here, named by the rule as the protocol words it, against real PostgreSQL and an
// upstream that counts what it executes. A rule added to a profile without a test fails here.
import { parseConfigText } from '../../src/compiler/load';
import { ConfigError } from '../../src/errors';
import { ACP } from '../../src/profiles/acp';
import { UCP } from '../../src/profiles/ucp';
import { createDisposablePostgres, type DisposablePostgres } from '../support/disposable-postgres';
import { send, type TestResponse } from '../support/http';
import { startProxy, type TestProxy } from '../support/proxy';
import { startUpstream, type TestUpstream } from '../support/upstream';

const DAY_MS = 24 * 3_600_000;
const ADMIN_TOKEN = 'profiles-admin-token';

let upstream: TestUpstream;
let proxy: TestProxy;
/** Requests to a `/hold` path wait here until the test lets them go. */
const held: (() => void)[] = [];
/** Paths whose next answer is this status (once). */
const failNext = new Map<string, number>();

const ROUTES = (url: string) => `
admin: { token: "${ADMIN_TOKEN}" }
store: { table: "\${TEST_TABLE}" }
upstreams:
  shop: { url: ${url} }
  gone: { url: http://127.0.0.1:1 }
routes:
  - name: acp
    match: { method: POST, path: /acp/** }
    upstream: shop
    idempotency: { profile: acp, tenant: ['header:x-caller'] }
  - name: acp-gone
    match: { method: POST, path: /acp-gone }
    upstream: gone
    idempotency: { profile: acp, tenant: ['header:x-caller'] }
  - name: ucp
    match: { method: POST, path: /ucp/** }
    upstream: shop
    idempotency: { profile: ucp, tenant: ['header:x-caller'], ttl: 48h }
`;

beforeAll(async () => {
  upstream = await startUpstream(async (req, res) => {
    if (req.url.includes('/hold')) await new Promise<void>((resolve) => held.push(resolve));
    const status = failNext.get(req.url);
    failNext.delete(req.url);
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (req.url.includes('/echoes'))
      headers['idempotency-key'] = String(req.headers['idempotency-key']);
    res.writeHead(status ?? 201, headers);
    res.end(JSON.stringify({ execution: upstream.executions().length, url: req.url }));
  });
  proxy = await startProxy({ yaml: ROUTES(upstream.url) });
});

afterAll(async () => {
  for (const release of held.splice(0)) release();
  await proxy?.close();
  await upstream?.close();
});

let keys = 0;
const newKey = () => `key-${Date.now()}-${++keys}`;

/** A POST with the raw body text as given, by caller `alice` unless said otherwise. */
function post(
  path: string,
  key: string | undefined,
  body: string,
  headers: Record<string, string> = {},
): Promise<TestResponse> {
  return send(`${proxy.url}${path}`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      'x-caller': 'alice',
      ...(key === undefined ? {} : { 'idempotency-key': key }),
      ...headers,
    },
    body,
  });
}

/** How many times the upstream ran requests to `path`. */
const ran = (path: string) => upstream.executions().filter((r) => r.url === path).length;

/** `check` on a config with `setting` added to the route of `profile`: the issues it finds. */
function checkIssues(profile: 'acp' | 'ucp', setting: string): string[] {
  const yaml = `upstreams: { shop: { url: http://127.0.0.1:4000 } }
routes:
  - name: r
    match: { path: /r }
    upstream: shop
    idempotency: { profile: ${profile}, ${setting.startsWith('tenant') ? setting : `tenant: ['header:x-caller'], ${setting}`} }
`;
  try {
    parseConfigText(yaml, 'proxy.yaml', {});
    return [];
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    return error.issues.map((issue) => `${issue.path}:${issue.line}: ${issue.message}`);
  }
}

/** The proxy's own answer on an ACP route: a flat error object and nothing else. */
function expectAcpError(res: TestResponse, status: number, type: string, code: string): void {
  expect(res.status).toBe(status);
  expect(res.headers['content-type']).toBe('application/json');
  const body = res.json();
  expect(Object.keys(body).sort()).toEqual(['code', 'message', 'type']);
  expect(body).toEqual({ type, code, message: expect.stringMatching(/\w/) });
}

/** The proxy's own answer on a UCP route: `{ code, content }`. */
function expectUcpError(res: TestResponse, status: number, code: string): void {
  expect(res.status).toBe(status);
  expect(res.headers['content-type']).toBe('application/json');
  expect(res.json()).toEqual({ code, content: expect.stringMatching(/\w/) });
}

/**
 * Starts a request that the upstream holds, and waits until the upstream has it; `answer` is its
 * answer once the test lets it go (wrapped: an async function would wait for a returned promise).
 */
async function holdOne(
  path: string,
  key: string,
  body: string,
): Promise<{ answer: Promise<TestResponse> }> {
  const before = held.length;
  const answer = post(path, key, body);
  while (held.length === before) await new Promise((resolve) => setTimeout(resolve, 5));
  return { answer };
}

const acpRules: Record<string, () => Promise<void>> = {
  'Clients MUST include an `Idempotency-Key` header on every POST request': async () => {
    const res = await post('/acp/checkout_sessions/required', undefined, '{"a":1}');
    expectAcpError(res, 400, 'invalid_request', 'idempotency_key_required');
    expect(ran('/acp/checkout_sessions/required')).toBe(0);
    expect(checkIssues('acp', 'key: { required: false }')).toEqual([
      expect.stringMatching(/^routes\[0\]\.idempotency\.key\.required:6: .*requires a key/),
    ]);
  },

  'The key is an opaque string, max 255 characters': async () => {
    const path = '/acp/checkout_sessions/length';
    const long = await post(path, 'k'.repeat(256), '{"a":1}');
    expectAcpError(long, 400, 'invalid_request', 'idempotency_key_invalid');
    expect(ran(path)).toBe(0);
    const longest = await post(path, 'k'.repeat(255), '{"a":1}');
    expect(longest.status).toBe(201);
    expect(ran(path)).toBe(1);
    expect(checkIssues('acp', 'key: { maxLength: 256 }')).toEqual([
      expect.stringMatching(/key\.maxLength:6: expected at most 255/),
    ]);
  },

  'Servers MUST scope keys to the authenticated identity + endpoint path': async () => {
    const key = newKey();
    const create = await post('/acp/checkout_sessions/scope', key, '{"a":1}');
    const other = await post('/acp/checkout_sessions/scope/complete', key, '{"b":2}');
    const bob = await post('/acp/checkout_sessions/scope', key, '{"a":1}', { 'x-caller': 'bob' });
    const again = await post('/acp/checkout_sessions/scope', key, '{"a":1}');
    expect([create.status, other.status, bob.status]).toEqual([201, 201, 201]);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(ran('/acp/checkout_sessions/scope')).toBe(2); // alice once, bob once
    expect(ran('/acp/checkout_sessions/scope/complete')).toBe(1);
    expect(checkIssues('acp', 'tenant: []')).toEqual([
      expect.stringMatching(/tenant:6: .*scopes keys by the caller/),
    ]);
  },

  'Equivalence is determined by semantic JSON equality of the request body only; headers are excluded':
    async () => {
      const path = '/acp/checkout_sessions/equivalence';
      const key = newKey();
      const first = await post(path, key, '{"items":[1,2],"note":null,"qty":1}');
      expect(first.status).toBe(201);
      const same = await post(path, key, ' { "qty": 1.0, "note": null, "items": [1, 2] }', {
        'x-trace': 'another',
      });
      expect(same.headers['idempotent-replayed']).toBe('true');
      const absent = await post(path, key, '{"items":[1,2],"qty":1}');
      expectAcpError(absent, 422, 'invalid_request', 'idempotency_conflict');
      const reordered = await post(path, key, '{"items":[2,1],"note":null,"qty":1}');
      expectAcpError(reordered, 422, 'invalid_request', 'idempotency_conflict');
      expect(ran(path)).toBe(1);
      expect(checkIssues('acp', 'fingerprint: { parts: [body] }')).toHaveLength(1);
    },

  'Same key + identical body → server MUST return the original response with the same HTTP status code':
    async () => {
      const path = '/acp/checkout_sessions/replay';
      const key = newKey();
      failNext.set(path, 200);
      const first = await post(path, key, '{"a":1}');
      const replay = await post(path, key, '{"a":1}');
      expect([first.status, replay.status]).toEqual([200, 200]);
      expect(replay.text()).toBe(first.text());
      expect(first.headers['idempotent-replayed']).toBeUndefined();
      expect(replay.headers['idempotent-replayed']).toBe('true');
      expect(ran(path)).toBe(1);
    },

  'Same key, different body: 422 `idempotency_conflict`': async () => {
    const path = '/acp/checkout_sessions/conflict';
    const key = newKey();
    await post(path, key, '{"amount":100}');
    const conflict = await post(path, key, '{"amount":200}');
    expectAcpError(conflict, 422, 'invalid_request', 'idempotency_conflict');
    expect(conflict.json().message).toMatch(
      /^Idempotency-Key has already been used with a different request body/,
    );
    expect(conflict.headers['retry-after']).toBeUndefined();
    expect(ran(path)).toBe(1);
  },

  'Same key, original request still in flight: 409 `idempotency_in_flight`': async () => {
    const path = '/acp/checkout_sessions/hold';
    const key = newKey();
    const first = await holdOne(path, key, '{"a":1}');
    const second = await post(path, key, '{"a":1}');
    expectAcpError(second, 409, 'invalid_request', 'idempotency_in_flight');
    expect(Number(second.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    held.shift()!();
    expect((await first.answer).status).toBe(201);
    expect(ran(path)).toBe(1);
  },

  'Error Shape (flat): `type`, `code`, `message`, `param`': async () => {
    const gone = await post('/acp-gone', newKey(), '{"a":1}');
    expectAcpError(gone, 502, 'processing_error', 'upstream_unreachable');
    const duplicate = await post('/acp/checkout_sessions/shape', newKey(), '{"a":1,"a":2}');
    expectAcpError(duplicate, 400, 'invalid_request', 'json_duplicate_key');
    expect(ran('/acp/checkout_sessions/shape')).toBe(0);
  },

  'Responses with HTTP 5xx status codes MUST NOT be cached against the idempotency key':
    async () => {
      const path = '/acp/checkout_sessions/no-cache';
      const key = newKey();
      failNext.set(path, 500);
      const failed = await post(path, key, '{"a":1}');
      expect(failed.status).toBe(500);
      const rows = await proxy.pool.query(`SELECT 1 FROM ${proxy.table} WHERE key = $1`, [key]);
      expect(rows.rowCount).toBe(0);
      expect(checkIssues('acp', 'unknownOutcome: fail')).toEqual([
        expect.stringMatching(/unknownOutcome:6: .*never stores a 5xx/),
      ]);
    },

  'A retry with the same key after a 5xx MUST be processed as a fresh request': async () => {
    const path = '/acp/checkout_sessions/fresh';
    const key = newKey();
    failNext.set(path, 503);
    expect((await post(path, key, '{"a":1}')).status).toBe(503);
    const retry = await post(path, key, '{"a":1}');
    expect(retry.status).toBe(201);
    expect(retry.headers['idempotent-replayed']).toBeUndefined();
    expect(ran(path)).toBe(2);
    const replay = await post(path, key, '{"a":1}');
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(ran(path)).toBe(2);
  },

  'Servers MUST retain idempotency key → response mappings for at least 24 hours': async () => {
    const before = Date.now();
    const res = await post('/acp/checkout_sessions/retain', newKey(), '{"a":1}');
    const expires = Date.parse(res.headers['idempotency-expires'] as string);
    expect(expires).toBeGreaterThanOrEqual(Math.floor(before / 1000) * 1000 + DAY_MS - 1000);
    expect(checkIssues('acp', 'ttl: 23h')).toEqual([
      expect.stringMatching(/ttl:6: expected a ttl of at least 24h/),
    ]);
  },

  '`Idempotency-Key` — echo on all POST responses': async () => {
    const path = '/acp/checkout_sessions/echo';
    const key = newKey();
    const first = await post(path, key, '{"a":1}');
    const replay = await post(path, key, '{"a":1}');
    const conflict = await post(path, key, '{"a":2}');
    for (const res of [first, replay, conflict]) expect(res.headers['idempotency-key']).toBe(key);
    const hold = '/acp/checkout_sessions/echo/hold';
    const holding = await holdOne(hold, key, '{"a":1}');
    const inFlight = await post(hold, key, '{"a":1}');
    expect([inFlight.status, inFlight.headers['idempotency-key']]).toEqual([409, key]);
    held.shift()!();
    expect((await holding.answer).headers['idempotency-key']).toBe(key);
    // An upstream that echoes the key itself: one header, not two.
    const echoes = await post('/acp/checkout_sessions/echoes', key, '{"a":1}');
    const raw = echoes.headers['idempotency-key'];
    expect(raw).toBe(key);
  },
};

const ucpRules: Record<string, () => Promise<void>> = {
  'Store the key with the operation result for at least 24 hours': async () => {
    const before = Date.now();
    const res = await post('/ucp/checkout-sessions/retain', newKey(), '{"a":1}');
    const expires = Date.parse(res.headers['idempotency-expires'] as string);
    expect(expires).toBeGreaterThanOrEqual(Math.floor(before / 1000) * 1000 + 2 * DAY_MS - 1000);
    expect(checkIssues('ucp', 'ttl: 12h')).toEqual([
      expect.stringMatching(/ttl:6: expected a ttl of at least 24h/),
    ]);
  },

  'Return the cached result for duplicate keys whose request body matches the original':
    async () => {
      const path = '/ucp/checkout-sessions/replay';
      const key = newKey();
      const first = await post(path, key, '{"line_items":[{"id":"x"}]}');
      const again = await post(path, key, '{"line_items":[{"id":"x"}]}');
      expect([first.status, again.status]).toEqual([201, 201]);
      expect(again.text()).toBe(first.text());
      expect(again.headers['idempotent-replayed']).toBe('true');
      expect(ran(path)).toBe(1);
    },

  'Return `409 Conflict` if the key is reused with a mismatched body': async () => {
    const path = '/ucp/checkout-sessions/conflict';
    const key = newKey();
    await post(path, key, '{"amount":100}');
    const conflict = await post(path, key, '{"amount":200}');
    expectUcpError(conflict, 409, 'idempotency_conflict');
    expect(conflict.json().content).toMatch(/different request body \(its bytes differ\)/);
    expect(conflict.headers['retry-after']).toBeUndefined();
    expect(ran(path)).toBe(1);
  },

  'comparing the SHA-256 hash of the raw body bytes': async () => {
    const path = '/ucp/checkout-sessions/bytes';
    const key = newKey();
    await post(path, key, '{"a":1,"b":2}');
    // The same JSON, other bytes: another payload under UCP.
    expectUcpError(await post(path, key, '{"b":2,"a":1}'), 409, 'idempotency_conflict');
    expectUcpError(await post(path, key, '{"a": 1, "b": 2}'), 409, 'idempotency_conflict');
    // Not JSON at all is compared the same way: by its bytes.
    const text = newKey();
    await post(path, text, 'plain', { 'content-type': 'text/plain' });
    const sameText = await post(path, text, 'plain', { 'content-type': 'text/plain' });
    expect(sameText.headers['idempotent-replayed']).toBe('true');
    expect(ran(path)).toBe(2);
  },

  'Proxies, API gateways, and other intermediaries MUST NOT re-serialize JSON bodies': async () => {
    const path = '/ucp/checkout-sessions/bytes-through';
    const body = '{ "z":1.50,\n  "a" : "\\u00e9", "n":12345678901234567891 }';
    await post(path, newKey(), body);
    const received = upstream.executions().find((r) => r.url === path)!;
    expect(received.body.equals(Buffer.from(body))).toBe(true);
  },

  'On storage failure: Fail closed (reject request with 503)': async () => {
    const path = '/ucp/checkout-sessions/outage';
    await database.stop();
    try {
      const res = await send(`${outageProxy.url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-caller': 'a', 'idempotency-key': 'k1' },
        body: '{"a":1}',
      });
      expectUcpError(res, 503, 'store_unavailable');
      expect(Number(res.headers['retry-after'])).toBeGreaterThanOrEqual(1);
      expect(ran(path)).toBe(0);
    } finally {
      await database.start();
    }
    expect(checkIssues('ucp', 'enforce: false')).toEqual([
      expect.stringMatching(/enforce:6: .*shadow mode/),
    ]);
  },

  'Protocol errors: Return appropriate HTTP status code (401, 403, 409, 429, 503) with JSON body containing `code` and `content`':
    async () => {
      const path = '/ucp/checkout-sessions/errors';
      expectUcpError(await post(path, undefined, '{"a":1}'), 400, 'idempotency_key_required');
      expectUcpError(await post(path, 'k'.repeat(300), '{}'), 400, 'idempotency_key_invalid');
      expect(ran(path)).toBe(0);
    },

  '`409 Conflict`: The request could not be completed due to a conflict': async () => {
    const path = '/ucp/checkout-sessions/hold';
    const key = newKey();
    const first = await holdOne(path, key, '{"a":1}');
    const second = await post(path, key, '{"a":1}');
    expectUcpError(second, 409, 'idempotency_in_flight');
    expect(Number(second.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    held.shift()!();
    expect((await first.answer).status).toBe(201);
    expect(ran(path)).toBe(1);
  },

  'Uniqueness: Per-client, per-operation type': async () => {
    const path = '/ucp/checkout-sessions/clients';
    const key = newKey();
    await post(path, key, '{"a":1}');
    const bob = await post(path, key, '{"b":2}', { 'x-caller': 'bob' });
    expect(bob.status).toBe(201);
    expect(ran(path)).toBe(2);
    expect(checkIssues('ucp', 'tenant: []')).toEqual([
      expect.stringMatching(/tenant:6: .*scopes keys by the caller/),
    ]);
  },
};

/** A test for every rule of the profile's table, named by it, and for no other. */
function rulesOf(profile: typeof ACP, tests: Record<string, () => Promise<void>>): void {
  test('every rule of the profile has its test', () => {
    expect(Object.keys(tests)).toEqual(profile.rules.map((r) => r.rule));
  });
  for (const [rule, run] of Object.entries(tests)) test(rule, run);
}

let database: DisposablePostgres;
let outageProxy: TestProxy;

describe('idempotency.profile: acp', () => {
  rulesOf(ACP, acpRules);

  test('an operator reads and clears a key under its path scope, and it runs again', async () => {
    const path = '/acp/checkout_sessions/cleared';
    const key = newKey();
    await post(path, key, '{"a":1}');
    const record = `${proxy.adminUrl}/api/records/${encodeURIComponent(`acp ${path}`)}/${key}?tenant=alice`;
    const headers = { authorization: `Bearer ${ADMIN_TOKEN}` };
    expect((await send(record, { method: 'GET', headers })).status).toBe(200);
    expect((await send(record, { method: 'DELETE', headers })).status).toBe(200);
    const again = await post(path, key, '{"a":1}');
    expect([again.status, again.headers['idempotent-replayed']]).toEqual([201, undefined]);
    expect(ran(path)).toBe(2);
  });
});

describe('idempotency.profile: ucp', () => {
  beforeAll(async () => {
    database = await createDisposablePostgres();
    await database.start();
    outageProxy = await startProxy({ databaseUrl: database.url, yaml: ROUTES(upstream.url) });
  }, 120_000);
  afterAll(async () => {
    await outageProxy?.close();
    await database?.dispose();
  });
  rulesOf(UCP, ucpRules);
});
