// idempotency-proxy/client against the real proxy: every retry rule of idempotentFetch proven with
// injected faults, counting what the upstream executed. The last block checks the argument and
// policy edges with a fake fetch, where a real proxy adds nothing.
import { randomUUID } from 'node:crypto';
import { Readable } from 'node:stream';
import {
  IdempotentFetchError,
  type IdempotentFetchInit,
  type RetryInfo,
  idempotentFetch,
  stepKey,
} from 'idempotency-proxy-client';
import { until } from '../support/eventually';
import { startProxy, type TestProxy } from '../support/proxy';
import { startUpstream, type TestUpstream } from '../support/upstream';

let upstream: TestUpstream;
let proxy: TestProxy;
/** Upstream requests held with ?hold, by key, until release(key). */
const held = new Map<string, (() => void)[]>();

function release(key: string): void {
  for (const resume of held.get(key) ?? []) resume();
  held.delete(key);
}

/** Resolves once the upstream holds a request with this key. */
async function heldUpstream(key: string): Promise<void> {
  await until(() => held.has(key), `the upstream to hold ${key}`, { intervalMs: 5 });
}

beforeAll(async () => {
  // Query parameters script the upstream, per key: ?hold keeps the answer until the test calls
  // release(key), ?drop hangs up after receiving the request, ?fail=n answers ?status= (503) to the
  // key's first n executions.
  const executionsByKey = new Map<string, number>();
  upstream = await startUpstream(async (req, res, raw) => {
    const url = new URL(req.url, 'http://upstream');
    const key = String(req.headers['idempotency-key']);
    const execution = (executionsByKey.get(key) ?? 0) + 1;
    executionsByKey.set(key, execution);
    if (url.searchParams.has('hold'))
      await new Promise<void>((resolve) => held.set(key, [...(held.get(key) ?? []), resolve]));
    if (url.searchParams.has('drop')) {
      raw.socket.destroy();
      return;
    }
    if (execution <= Number(url.searchParams.get('fail') ?? 0)) {
      const retryAfter = url.searchParams.get('retryAfter');
      res.writeHead(Number(url.searchParams.get('status') ?? 503), {
        'content-type': 'text/plain',
        ...(retryAfter === null ? {} : { 'retry-after': retryAfter }),
      });
      res.end(`not now (execution ${execution})`);
      return;
    }
    res.writeHead(201, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ execution, key, body: req.body.toString('utf8') }));
  });
  proxy = await startProxy({
    yaml: `
store:
  table: \${TEST_TABLE}
upstreams:
  api: { url: ${upstream.url}, timeout: 5s }
  dead: { url: http://127.0.0.1:1 }
defaults:
  lockTimeout: 10s
routes:
  - name: tools
    match: { path: /tools/** }
    upstream: api
    idempotency: {}
  - name: custom
    match: { path: /custom }
    upstream: api
    idempotency: { key: { header: X-Request-Key }, replayedHeader: X-Replayed }
  - name: dead
    match: { path: /dead }
    upstream: dead
    idempotency: {}
  - name: acp
    match: { path: /acp/** }
    upstream: api
    idempotency: { profile: acp, tenant: ['header:x-shop-caller'] }
  - name: ucp
    match: { path: /ucp/** }
    upstream: api
    idempotency: { profile: ucp, tenant: ['header:x-shop-caller'] }
`,
  });
});

afterAll(async () => {
  for (const key of held.keys()) release(key);
  await proxy?.close();
  await upstream?.close();
});

/** A fresh step key, as an agent derives it: a new run id per test. */
const newKey = (tool = 'refund_order') => stepKey({ runId: randomUUID(), step: 1, tool });

/** What the upstream executed under `key`. */
const executionsOf = (key: string) =>
  upstream.executions().filter((r) => r.headers['idempotency-key'] === key);

/** An injected sleep that records the waits and returns at once. */
function recordingSleep(): { waits: number[]; sleep: NonNullable<IdempotentFetchInit['sleep']> } {
  const waits: number[] = [];
  return { waits, sleep: async (ms) => void waits.push(ms) };
}

const refund = { order: 'ord_42', amount: 49.99 };

function post(key: string, extra: Partial<IdempotentFetchInit> = {}): IdempotentFetchInit {
  return {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(refund),
    idempotencyKey: key,
    ...extra,
  };
}

describe('against the proxy', () => {
  test('an attempt that times out is resent with the same key: 409 while it runs, then its replay', async () => {
    const key = newKey();
    const retries: RetryInfo[] = [];
    const result = await idempotentFetch(
      `${proxy.url}/tools/refunds?hold`,
      post(key, {
        retry: { attemptTimeoutMs: 100, baseDelayMs: 20, maxDelayMs: 50, maxAttempts: 50 },
        onRetry: (info) => {
          retries.push(info);
          // The upstream answers only once a retry has seen the 409: the order is certain.
          if (info.reason === 'in-flight') release(key);
        },
      }),
    );
    expect(result).toMatchObject({ status: 201, replayed: true, outcome: undefined, key });
    expect(result.attempts).toBeGreaterThanOrEqual(3);
    expect(await result.response.json()).toEqual({
      execution: 1,
      key,
      body: JSON.stringify(refund),
    });
    expect(executionsOf(key)).toHaveLength(1);
    expect(retries[0]).toMatchObject({ attempt: 1, reason: 'attempt-timeout', key });
    expect(retries[1]).toMatchObject({ attempt: 2, reason: 'in-flight', status: 409, delayMs: 50 });
    // The 409's Retry-After is the lease left (about 10 s); each wait is capped at maxDelayMs.
    expect(retries[1]?.retryAfterMs).toBeGreaterThanOrEqual(8_000);
    expect(retries.map((r) => r.attempt)).toEqual(retries.map((_, i) => i + 1));
  });

  test('a network error before sending is retried with the same key: one execution', async () => {
    const key = newKey();
    const seen: string[] = [];
    let calls = 0;
    const flaky: typeof fetch = async (input, init) => {
      seen.push(new Headers(init?.headers).get('idempotency-key') ?? '');
      if (++calls === 1) throw new TypeError('fetch failed', { cause: new Error('ECONNRESET') });
      return fetch(input, init);
    };
    const { waits, sleep: fakeSleep } = recordingSleep();
    const result = await idempotentFetch(
      `${proxy.url}/tools/refunds`,
      post(key, { fetch: flaky, sleep: fakeSleep, random: () => 0.5 }),
    );
    expect(result).toMatchObject({ status: 201, replayed: false, attempts: 2 });
    expect(seen).toEqual([key, key]);
    expect(waits).toEqual([125]); // full jitter: 0.5 × 250 ms
    expect(executionsOf(key)).toHaveLength(1);
    expect(executionsOf(key)[0]?.body.toString()).toBe(JSON.stringify(refund));
  });

  test('gives up with IdempotentFetchError when no attempt reaches the proxy', async () => {
    const key = newKey();
    const { waits, sleep: fakeSleep } = recordingSleep();
    const closed = await startUpstream();
    await closed.close(); // a port where nothing listens: connection refused, nothing sent
    const error: unknown = await idempotentFetch(
      `${closed.url}/tools/refunds`,
      post(key, { sleep: fakeSleep, retry: { maxAttempts: 3 } }),
    ).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(IdempotentFetchError);
    expect(error).toMatchObject({ code: 'ATTEMPTS_EXHAUSTED', key, attempts: 3 });
    // Node's fetch throws its own realm's TypeError ("fetch failed"), so compare by name.
    expect((error as Error).cause).toMatchObject({ name: 'TypeError', message: 'fetch failed' });
    expect(waits).toHaveLength(2);
  });

  test('a released 503 from the upstream is retried with backoff until it succeeds', async () => {
    const key = newKey();
    const { waits, sleep: fakeSleep } = recordingSleep();
    const retries: RetryInfo[] = [];
    const result = await idempotentFetch(
      `${proxy.url}/tools/refunds?fail=2&status=503`,
      post(key, {
        sleep: fakeSleep,
        random: () => 0.5,
        retry: { baseDelayMs: 100 },
        onRetry: (info) => retries.push(info),
      }),
    );
    expect(result).toMatchObject({ status: 201, replayed: false, attempts: 3 });
    expect(await result.response.json()).toMatchObject({ execution: 3 });
    // 503 is in the proxy's default `release`: the claim was dropped, so each retry executed.
    expect(executionsOf(key)).toHaveLength(3);
    expect(waits).toEqual([50, 100]); // 0.5 × 100 ms, then 0.5 × 200 ms
    expect(retries.map((r) => [r.reason, r.status])).toEqual([
      ['unavailable', 503],
      ['unavailable', 503],
    ]);
  });

  test("a 429 waits the upstream's Retry-After before the retry", async () => {
    const key = newKey();
    const { waits, sleep: fakeSleep } = recordingSleep();
    const result = await idempotentFetch(
      `${proxy.url}/tools/refunds?fail=1&status=429&retryAfter=2`,
      post(key, { sleep: fakeSleep, random: () => 0.5 }),
    );
    expect(result).toMatchObject({ status: 201, attempts: 2, replayed: false });
    expect(waits).toEqual([2_000]);
    expect(executionsOf(key)).toHaveLength(2);
  });

  test('a 400 for a key sent in the wrong header is final: one attempt, nothing forwarded', async () => {
    const key = newKey();
    const { waits, sleep: fakeSleep } = recordingSleep();
    const result = await idempotentFetch(`${proxy.url}/custom`, post(key, { sleep: fakeSleep }));
    expect(result).toMatchObject({ status: 400, attempts: 1, replayed: false });
    expect(await result.response.json()).toMatchObject({ code: 'IDEMPOTENCY_KEY_MISSING' });
    expect(waits).toEqual([]);
    expect(executionsOf(key)).toHaveLength(0);
  });

  test("sends the key in the route's header and reads its replay marker when told their names", async () => {
    const key = newKey();
    const init = post(key, { keyHeader: 'X-Request-Key', replayedHeader: 'X-Replayed' });
    const first = await idempotentFetch(`${proxy.url}/custom`, init);
    const again = await idempotentFetch(`${proxy.url}/custom`, init);
    expect(first).toMatchObject({ status: 201, replayed: false, attempts: 1 });
    expect(again).toMatchObject({ status: 201, replayed: true, attempts: 1 });
    expect(again.response.headers.get('idempotent-replayed')).toBeNull();
    expect(executionsOf(key)).toHaveLength(1);
  });

  test('a 422 for the same key with a different body is final: one attempt', async () => {
    const key = newKey();
    const { waits, sleep: fakeSleep } = recordingSleep();
    await idempotentFetch(`${proxy.url}/tools/refunds`, post(key));
    const changed = await idempotentFetch(
      `${proxy.url}/tools/refunds`,
      post(key, { body: JSON.stringify({ ...refund, amount: 45 }), sleep: fakeSleep }),
    );
    expect(changed).toMatchObject({ status: 422, attempts: 1, replayed: false });
    expect(await changed.response.json()).toMatchObject({ code: 'IDEMPOTENCY_KEY_REUSED' });
    expect(waits).toEqual([]);
    expect(executionsOf(key)).toHaveLength(1);
  });

  describe.each([
    ['acp', 422],
    ['ucp', 409],
  ])('on a %s profile route', (profile, conflictStatus) => {
    const shopPost = (key: string, extra: Partial<IdempotentFetchInit> = {}) =>
      post(key, {
        headers: { 'content-type': 'application/json', 'x-shop-caller': 'agent-7' },
        ...extra,
      });

    test(`a ${conflictStatus} idempotency_conflict is final: one attempt`, async () => {
      const key = newKey();
      const { waits, sleep: fakeSleep } = recordingSleep();
      await idempotentFetch(`${proxy.url}/${profile}/checkout`, shopPost(key));
      const changed = await idempotentFetch(
        `${proxy.url}/${profile}/checkout`,
        shopPost(key, { body: JSON.stringify({ ...refund, amount: 45 }), sleep: fakeSleep }),
      );
      expect(changed).toMatchObject({ status: conflictStatus, attempts: 1, replayed: false });
      expect(await changed.response.json()).toMatchObject({ code: 'idempotency_conflict' });
      expect(waits).toEqual([]);
      expect(executionsOf(key)).toHaveLength(1);
    });

    test('the in-flight 409 with Retry-After is retried until the first answer replays', async () => {
      const key = newKey();
      const url = `${proxy.url}/${profile}/checkout?hold`;
      const first = fetch(url, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'x-shop-caller': 'agent-7',
          'idempotency-key': key,
        },
        body: JSON.stringify(refund),
      });
      await heldUpstream(key);
      const retries: RetryInfo[] = [];
      const result = await idempotentFetch(
        url,
        shopPost(key, {
          retry: { baseDelayMs: 20, maxDelayMs: 50, maxAttempts: 50 },
          onRetry: (info) => {
            retries.push(info);
            release(key);
          },
        }),
      );
      expect((await first).status).toBe(201);
      expect(result).toMatchObject({ status: 201, replayed: true });
      expect(retries[0]).toMatchObject({ reason: 'in-flight', status: 409 });
      expect(retries[0]?.retryAfterMs).toBeGreaterThanOrEqual(1_000);
      expect(executionsOf(key)).toHaveLength(1);
    });
  });

  test('surfaces Idempotency-Outcome: unknown and does not retry it', async () => {
    const key = newKey();
    const { waits, sleep: fakeSleep } = recordingSleep();
    const result = await idempotentFetch(
      `${proxy.url}/tools/refunds?drop`,
      post(key, { sleep: fakeSleep }),
    );
    expect(result).toMatchObject({ status: 502, outcome: 'unknown', attempts: 1, replayed: false });
    expect(await result.response.json()).toMatchObject({ code: 'UPSTREAM_CONNECTION_LOST' });
    expect(waits).toEqual([]);
    // Under `unknownOutcome: fail` the answer is stored: a later call replays it, still unknown.
    const later = await idempotentFetch(`${proxy.url}/tools/refunds?drop`, post(key));
    expect(later).toMatchObject({ status: 502, outcome: 'unknown', replayed: true, attempts: 1 });
    expect(executionsOf(key)).toHaveLength(1);
  });

  test('retries a 502 that says nothing was sent, and returns the last one when attempts run out', async () => {
    const key = newKey();
    const { waits, sleep: fakeSleep } = recordingSleep();
    const retries: RetryInfo[] = [];
    const result = await idempotentFetch(
      `${proxy.url}/dead`,
      post(key, { sleep: fakeSleep, retry: { maxAttempts: 3 }, onRetry: (i) => retries.push(i) }),
    );
    expect(result).toMatchObject({ status: 502, outcome: undefined, attempts: 3, replayed: false });
    expect(await result.response.json()).toMatchObject({ code: 'UPSTREAM_UNREACHABLE' });
    expect(retries.map((r) => r.reason)).toEqual(['gateway-error', 'gateway-error']);
    expect(waits).toHaveLength(2);
  });

  test("the caller's signal cancels a Retry-After wait", async () => {
    const key = newKey();
    const url = `${proxy.url}/tools/refunds?hold`;
    const first = idempotentFetch(url, post(key));
    await heldUpstream(key); // the first request holds the claim
    const controller = new AbortController();
    const retries: RetryInfo[] = [];
    const started = Date.now();
    const second = idempotentFetch(
      url,
      post(key, {
        signal: controller.signal,
        onRetry: (info) => {
          retries.push(info);
          setTimeout(() => controller.abort(new Error('agent cancelled')), 50);
        },
      }),
    );
    await expect(second).rejects.toThrow('agent cancelled');
    expect(Date.now() - started).toBeLessThan(2_000); // not the 5 s wait (Retry-After ≈ 10 s, capped)
    expect(retries).toEqual([expect.objectContaining({ reason: 'in-flight', delayMs: 5_000 })]);
    release(key);
    expect(await first).toMatchObject({ status: 201, attempts: 1, replayed: false });
    expect(executionsOf(key)).toHaveLength(1);
  });
});

describe('without a proxy', () => {
  const fixed = (status: number, headers: Record<string, string> = {}) => {
    const calls: RequestInit[] = [];
    const fake: typeof fetch = async (_input, init) => {
      calls.push(init ?? {});
      return new Response(`status ${status}`, { status, headers });
    };
    return { calls, fake };
  };

  test.each([400, 404, 413, 422, 500, 201])('does not retry a %d', async (status) => {
    const { calls, fake } = fixed(status);
    const result = await idempotentFetch('http://proxy.test/x', {
      method: 'POST',
      idempotencyKey: 'k-1',
      fetch: fake,
    });
    expect(result).toMatchObject({ status, attempts: 1 });
    expect(calls).toHaveLength(1);
  });

  test('retries a 409 with Retry-After (in flight), not one without (a UCP conflict)', async () => {
    const inFlight = fixed(409, { 'retry-after': '0' });
    const retried = await idempotentFetch('http://proxy.test/x', {
      method: 'POST',
      idempotencyKey: 'k-1',
      fetch: inFlight.fake,
      retry: { maxAttempts: 2 },
    });
    expect(retried).toMatchObject({ status: 409, attempts: 2 });
    const conflict = fixed(409);
    const final = await idempotentFetch('http://proxy.test/x', {
      method: 'POST',
      idempotencyKey: 'k-1',
      fetch: conflict.fake,
      retry: { maxAttempts: 2 },
    });
    expect(final).toMatchObject({ status: 409, attempts: 1 });
    expect(conflict.calls).toHaveLength(1);
  });

  test('does not retry a replayed answer, whatever its status', async () => {
    const { calls, fake } = fixed(503, { 'idempotent-replayed': 'true' });
    const result = await idempotentFetch('http://proxy.test/x', {
      idempotencyKey: 'k-1',
      fetch: fake,
    });
    expect(result).toMatchObject({ status: 503, replayed: true, attempts: 1 });
    expect(calls).toHaveLength(1);
  });

  test('does not retry a 504 with Idempotency-Outcome: unknown, but retries one without', async () => {
    const unknown = fixed(504, { 'idempotency-outcome': 'unknown' });
    const result = await idempotentFetch('http://proxy.test/x', {
      idempotencyKey: 'k-1',
      fetch: unknown.fake,
    });
    expect(result).toMatchObject({ status: 504, outcome: 'unknown', attempts: 1 });
    const { waits, sleep: fakeSleep } = recordingSleep();
    const plain = fixed(504);
    const retried = await idempotentFetch('http://proxy.test/x', {
      idempotencyKey: 'k-1',
      fetch: plain.fake,
      sleep: fakeSleep,
    });
    expect(retried).toMatchObject({ status: 504, outcome: undefined, attempts: 5 });
    expect(waits).toHaveLength(4);
  });

  test('reads an HTTP-date Retry-After against its clock', async () => {
    const now = Date.parse('2025-01-01T00:00:00Z');
    const { waits, sleep: fakeSleep } = recordingSleep();
    const { fake } = fixed(503, { 'retry-after': 'Wed, 01 Jan 2025 00:00:03 GMT' });
    await idempotentFetch('http://proxy.test/x', {
      idempotencyKey: 'k-1',
      fetch: fake,
      sleep: fakeSleep,
      now: () => now,
      retry: { maxAttempts: 2 },
    });
    expect(waits).toEqual([3_000]);
  });

  test('stops before a wait that would overrun maxElapsedMs', async () => {
    let clock = 0;
    const { calls, fake } = fixed(429, { 'retry-after': '2' });
    const result = await idempotentFetch('http://proxy.test/x', {
      idempotencyKey: 'k-1',
      fetch: fake,
      now: () => clock,
      sleep: async (ms) => void (clock += ms),
      retry: { maxElapsedMs: 5_000 },
    });
    expect(result).toMatchObject({ status: 429, attempts: 3 }); // waits at 0 → 2 s → 4 s; 6 s > 5 s
    expect(calls).toHaveLength(3);
  });

  test('resends the same bytes even if the caller changes its buffer after the call', async () => {
    const bodies: string[] = [];
    let calls = 0;
    const fake: typeof fetch = async (input, init) => {
      bodies.push(await new Response(init?.body).text());
      return new Response('', { status: ++calls < 3 ? 503 : 201 });
    };
    const buffer = Buffer.from('{"amount":40}');
    const pending = idempotentFetch('http://proxy.test/x', {
      method: 'POST',
      body: buffer,
      idempotencyKey: 'k-1',
      fetch: fake,
      sleep: async () => void buffer.write('{"amount":45}'),
    });
    expect(await pending).toMatchObject({ status: 201, attempts: 3 });
    expect(bodies).toEqual(['{"amount":40}', '{"amount":40}', '{"amount":40}']);
  });

  test.each([
    [
      'a ReadableStream',
      () => new ReadableStream(),
      /cannot send a stream body: a stream can be read only once/,
    ],
    ['a Node Readable', () => Readable.from(['x']), /cannot send a stream body/],
    ['FormData', () => new FormData(), /new multipart boundary/],
    ['a plain object', () => ({ amount: 1 }), /JSON.stringify/],
  ])('rejects %s as a body with a TypeError saying why', async (_name, makeBody, message) => {
    const { calls, fake } = fixed(201);
    const call = idempotentFetch('http://proxy.test/x', {
      method: 'POST',
      body: makeBody() as never,
      idempotencyKey: 'k-1',
      fetch: fake,
    });
    await expect(call).rejects.toThrow(TypeError);
    await expect(call).rejects.toThrow(message);
    expect(calls).toHaveLength(0);
  });

  test.each([
    ['an empty key', { idempotencyKey: '' }, /1–255 visible ASCII/],
    ['a key with a space', { idempotencyKey: 'a b' }, /visible ASCII/],
    ['a conflicting key header', { headers: { 'Idempotency-Key': 'other' } }, /pass the key once/],
    ['zero attempts', { retry: { maxAttempts: 0 } }, /maxAttempts must be an integer ≥ 1/],
  ])('rejects %s', async (_name, extra, message) => {
    const { fake } = fixed(201);
    await expect(
      idempotentFetch('http://proxy.test/x', { idempotencyKey: 'k-1', fetch: fake, ...extra }),
    ).rejects.toThrow(message);
  });

  test('rejects a relative URL and a Request', async () => {
    await expect(idempotentFetch('/x', { idempotencyKey: 'k' })).rejects.toThrow(/absolute URL/);
    await expect(
      idempotentFetch(new Request('http://proxy.test/x') as never, { idempotencyKey: 'k' }),
    ).rejects.toThrow(/not a Request/);
  });

  test('rejects at once when the signal is already aborted', async () => {
    const { calls, fake } = fixed(201);
    await expect(
      idempotentFetch('http://proxy.test/x', {
        idempotencyKey: 'k',
        fetch: fake,
        signal: AbortSignal.abort(new Error('stop')),
      }),
    ).rejects.toThrow('stop');
    expect(calls).toHaveLength(0);
  });
});
