// Shadow mode (`enforce: false`): every request is forwarded and the upstream's answer
// returned unchanged — status, headers, body — while the log (and the metric built from it) records
// what enforcement would have done. Records are still written when a request wins its claim, so
// later requests see what would have happened.
import http from 'node:http';
import type { RequestLogEntry } from '../../src/http/request-log';
import { ProxyMetrics } from '../../src/metrics';
import { createDisposablePostgres, type DisposablePostgres } from '../support/disposable-postgres';
import { until } from '../support/eventually';
import { postJson, send, type TestResponse } from '../support/http';
import { startProxy, type TestProxy } from '../support/proxy';
import { sleep, startUpstream, type TestUpstream } from '../support/upstream';

interface SentResponse {
  readonly status: number;
  readonly headers: Record<string, string>;
  readonly body: Buffer;
}

/** An upstream that answers every execution differently and remembers exactly what it sent. */
async function recordingUpstream(sent: SentResponse[]): Promise<TestUpstream> {
  return startUpstream(async (req, res) => {
    const url = new URL(req.url, 'http://upstream');
    const slowMs = Number(url.searchParams.get('slow') ?? 0);
    if (slowMs > 0) await sleep(slowMs);
    const execution = sent.length + 1;
    const status = Number(url.searchParams.get('status') ?? 201);
    const headers = {
      'content-type': 'application/json',
      'x-execution': String(execution),
      'set-cookie': `session=${execution}`,
    };
    const body = Buffer.from(
      JSON.stringify({
        execution,
        receivedBytes: req.body.length,
        key: req.headers['idempotency-key'] ?? null,
      }),
    );
    sent.push({ status, headers, body });
    res.writeHead(status, headers);
    res.end(body);
  });
}

const PROXY_MARKERS = [
  'idempotent-replayed',
  'idempotency-key-derived',
  'idempotency-outcome',
  'idempotent-body-omitted',
  'retry-after',
];

/** The client got exactly what the upstream sent for this request's own execution. */
function expectUnaltered(sent: SentResponse[], res: TestResponse): void {
  const execution = Number(res.headers['x-execution']);
  expect(execution).toBeGreaterThan(0);
  const original = sent[execution - 1]!;
  expect(res.status).toBe(original.status);
  expect(res.body.equals(original.body)).toBe(true);
  expect(res.headers['content-type']).toBe(original.headers['content-type']);
  expect(res.headers['set-cookie']).toEqual([original.headers['set-cookie']]);
  for (const marker of PROXY_MARKERS) expect(res.headers[marker]).toBeUndefined();
}

async function requestLines(proxy: TestProxy, count: number): Promise<Record<string, unknown>[]> {
  const lines = () => proxy.logs.filter((line) => line.msg === 'request');
  // After 1 s, the lines there are: the caller's assertion reports what is missing.
  await until(() => lines().length >= count, `${count} request log lines`, {
    timeoutMs: 1_000,
  }).catch(() => undefined);
  return lines();
}

/** Resolves once `upstream` has received a request with this key after the `since`th. */
async function reachedUpstream(upstream: TestUpstream, key: string, since = 0): Promise<void> {
  await until(
    () => upstream.received.slice(since).some((r) => r.headers['idempotency-key'] === key),
    `${key} to reach the upstream`,
    { intervalMs: 10 },
  );
}

describe('shadow mode in front of a running store', () => {
  const sent: SentResponse[] = [];
  let upstream: TestUpstream;
  let proxy: TestProxy;

  beforeAll(async () => {
    upstream = await recordingUpstream(sent);
    proxy = await startProxy({
      yaml: `
store:
  table: \${TEST_TABLE}
upstreams:
  api: { url: ${upstream.url}, timeout: 5s }
defaults:
  maxRequestBytes: 1kb
  lockTimeout: 30s
routes:
  - name: shadow
    match: { method: POST, path: /shadow }
    upstream: api
    idempotency: { enforce: false }
  - name: shadow-wait
    match: { method: POST, path: /shadow-wait }
    upstream: api
    idempotency: { enforce: false, onConcurrent: wait }
  - name: shadow-derived
    match: { method: POST, path: /shadow-derived }
    upstream: api
    idempotency:
      enforce: false
      key: { derive: [body], window: 1m }
  - name: enforced
    match: { method: POST, path: /enforced }
    upstream: api
    idempotency: {}
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

  test('never alters a response: first, would-replay, would-422, would-409, would-400 and would-413 are all forwarded', async () => {
    const url = `${proxy.url}/shadow`;
    const responses: TestResponse[] = [];
    const call = async (request: Promise<TestResponse>): Promise<TestResponse> => {
      const res = await request;
      responses.push(res);
      expectUnaltered(sent, res);
      return res;
    };

    const first = await call(postJson(url, 'order-1', { amount: 10 }));
    await call(postJson(url, 'order-1', { amount: 10 })); // enforcing: replay
    await call(postJson(url, 'order-1', { amount: 99 })); // enforcing: 422
    const slow = postJson(`${url}?slow=400`, 'order-2', { amount: 20 });
    await reachedUpstream(upstream, 'order-2');
    await call(postJson(`${url}?slow=400`, 'order-2', { amount: 20 })); // enforcing: 409
    await call(slow);
    await call(postJson(url, undefined, { amount: 30 })); // enforcing: 400 missing
    await call(postJson(url, 'has space', { amount: 30 })); // enforcing: 400 invalid
    await call(
      send(url, {
        headers: { 'content-type': 'application/json', 'idempotency-key': 'big-1' },
        body: `{"pad":"${'x'.repeat(2_000)}"}`,
      }),
    ); // enforcing: 413 (declared length)
    const chunked = await call(
      send(url, {
        headers: { 'content-type': 'application/json', 'idempotency-key': 'big-2' },
        body: `{"pad":"${'y'.repeat(5_000)}"}`,
        chunked: true,
      }),
    ); // enforcing: 413 (found while reading)

    // The upstream was called for every request, with every byte of the oversized bodies.
    expect(upstream.executions()).toHaveLength(responses.length);
    expect(first.json()).toMatchObject({ execution: expect.any(Number), key: 'order-1' });
    expect(chunked.json()).toMatchObject({ receivedBytes: 5_010 });
    const big = upstream.executions().filter((r) => r.body.length > 1_024);
    expect(big.map((r) => r.body.length)).toEqual([2_010, 5_010]);
    expect(big[1]!.body.toString()).toBe(`{"pad":"${'y'.repeat(5_000)}"}`);

    const lines = await requestLines(proxy, responses.length);
    const byKey = (key: string | undefined) =>
      lines.filter((l) => l.key === key).map((l) => [l.shadow, l.outcome]);
    expect(byKey('order-1')).toEqual([
      [undefined, 'executed'],
      ['would_replay', 'executed'],
      ['would_reject_mismatch', 'executed'],
    ]);
    expect(byKey('order-2').sort()).toEqual(
      [
        ['would_reject_in_flight', 'executed'],
        [undefined, 'executed'],
      ].sort(),
    );
    expect(
      byKey(undefined)
        .map(([shadow]) => shadow)
        .sort(),
    ).toEqual(['would_reject_invalid_key', 'would_reject_missing_key']);
    expect(byKey('big-1')).toEqual([['would_reject_too_large', 'passthrough']]);
    expect(byKey('big-2')).toEqual([['would_reject_too_large', 'passthrough']]);
    expect(lines.every((l) => l.status === 201)).toBe(true);
  });

  test('forwards a chunked body that outgrows maxRequestBytes over several writes, byte for byte', async () => {
    const pieces = ['{"pad":"', 'a'.repeat(700), 'b'.repeat(700), 'c'.repeat(3_000), '"}'];
    const res = await new Promise<TestResponse>((resolve, reject) => {
      const req = http.request(
        `${proxy.url}/shadow`,
        {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'idempotency-key': 'pieces-1' },
        },
        (response) => {
          const chunks: Buffer[] = [];
          response.on('data', (chunk: Buffer) => chunks.push(chunk));
          response.on('end', () => {
            const body = Buffer.concat(chunks);
            resolve({
              status: response.statusCode ?? 0,
              headers: response.headers,
              body,
              text: () => body.toString(),
              json: <T>() => JSON.parse(body.toString()) as T,
            });
          });
        },
      );
      req.on('error', reject);
      void (async () => {
        for (const piece of pieces) {
          req.write(piece);
          await sleep(30); // separate reads on the proxy: the limit is crossed mid-body
        }
        req.end();
      })();
    });
    expectUnaltered(sent, res);
    expect(upstream.executions()).toHaveLength(1);
    expect(upstream.executions()[0]!.body.toString()).toBe(pieces.join(''));
    const lines = await requestLines(proxy, 1);
    expect(lines.map((l) => l.shadow)).toEqual(['would_reject_too_large']);
  });

  test('records the first execution and leaves the record alone on later requests', async () => {
    const url = `${proxy.url}/shadow`;
    const first = await postJson(url, 'record-1', { amount: 1 });
    await postJson(url, 'record-1', { amount: 1 });
    await postJson(url, 'record-1', { amount: 2 });
    const { rows } = await proxy.pool.query<{ state: string; attempts: number; body: Buffer }>(
      `SELECT state, attempts, body FROM ${proxy.table} WHERE scope = 'shadow' AND key = 'record-1'`,
    );
    expect(rows).toHaveLength(1);
    expect(rows[0]!.state).toBe('completed');
    expect(rows[0]!.attempts).toBe(3); // the claim's counter, bumped by each request
    expect(rows[0]!.body.equals(first.body)).toBe(true); // still the first execution's answer
    expect(upstream.executions()).toHaveLength(3);
  });

  test('releases the claim on a released status, as enforcement would', async () => {
    const url = `${proxy.url}/shadow?status=503`;
    const first = await postJson(url, 'released-1', {});
    expectUnaltered(sent, first);
    const again = await postJson(url, 'released-1', {});
    expectUnaltered(sent, again);
    const lines = await requestLines(proxy, 2);
    expect(lines.map((l) => l.shadow)).toEqual([undefined, undefined]); // both would have run
    const { rows } = await proxy.pool.query(
      `SELECT 1 FROM ${proxy.table} WHERE key = 'released-1'`,
    );
    expect(rows).toHaveLength(0);
  });

  test('logs would_wait for a duplicate in flight under onConcurrent: wait, without waiting', async () => {
    const url = `${proxy.url}/shadow-wait?slow=400`;
    const first = postJson(url, 'wait-1', {});
    await reachedUpstream(upstream, 'wait-1');
    const started = Date.now();
    const duplicate = await postJson(url, 'wait-1', {});
    expectUnaltered(sent, duplicate);
    expect(Date.now() - started).toBeLessThan(1_500);
    expectUnaltered(sent, await first);
    const lines = await requestLines(proxy, 2);
    expect(lines.map((l) => l.shadow).sort()).toEqual([undefined, 'would_wait'].sort());
    expect(upstream.executions()).toHaveLength(2);
  });

  test('derives keys in shadow mode too, without marking any response', async () => {
    const url = `${proxy.url}/shadow-derived`;
    const first = await postJson(url, undefined, { to: 'shadow@example.com' });
    const repeat = await postJson(url, undefined, { to: 'shadow@example.com' });
    expectUnaltered(sent, first);
    expectUnaltered(sent, repeat);
    expect(repeat.json()).not.toEqual(first.json());
    const lines = await requestLines(proxy, 2);
    expect(lines.map((l) => [l.keyDerived, l.shadow])).toEqual([
      [true, undefined],
      [true, 'would_replay'],
    ]);
    expect(lines[0]!.key).toMatch(/^derived:/);
    expect(upstream.executions().map((r) => r.headers['idempotency-key'])).toEqual([
      lines[0]!.key,
      lines[0]!.key,
    ]);
  });

  test('predicts what the same requests get from an enforcing route', async () => {
    const sequence = async (path: string): Promise<void> => {
      await postJson(`${proxy.url}${path}`, 'same-1', { a: 1 });
      await postJson(`${proxy.url}${path}`, 'same-1', { a: 1 });
      await postJson(`${proxy.url}${path}`, 'same-1', { a: 2 });
      const since = upstream.received.length; // the sequence runs twice
      const slow = postJson(`${proxy.url}${path}?slow=300`, 'same-2', {});
      await reachedUpstream(upstream, 'same-2', since);
      await postJson(`${proxy.url}${path}?slow=300`, 'same-2', {});
      await slow;
      await postJson(`${proxy.url}${path}`, undefined, {});
    };
    await sequence('/enforced');
    await sequence('/shadow');
    const lines = await requestLines(proxy, 12);
    const enforced = lines.filter((l) => l.route === 'enforced').map((l) => l.outcome);
    const shadow = lines.filter((l) => l.route === 'shadow').map((l) => l.shadow ?? 'executed');
    const prediction: Record<string, string> = {
      executed: 'executed',
      replayed: 'would_replay',
      mismatch: 'would_reject_mismatch',
      in_flight: 'would_reject_in_flight',
      missing_key: 'would_reject_missing_key',
    };
    expect(shadow.sort()).toEqual(enforced.map((outcome) => prediction[String(outcome)]).sort());
    expect(enforced).toContain('in_flight');
  });

  test('counts shadow decisions in idempotency_proxy_shadow_decisions_total', async () => {
    const url = `${proxy.url}/shadow`;
    await postJson(url, 'count-1', {});
    await postJson(url, 'count-1', {});
    await postJson(url, 'count-1', {});
    await postJson(url, 'count-1', { other: true });
    await postJson(url, undefined, {});
    const lines = await requestLines(proxy, 5);
    const metrics = new ProxyMetrics({ defaultMetrics: false });
    for (const line of lines) metrics.observeRequest(line as unknown as RequestLogEntry);
    const metric = await metrics.registry
      .getSingleMetric('idempotency_proxy_shadow_decisions_total')!
      .get();
    const counts = Object.fromEntries(metric.values.map((v) => [String(v.labels.would), v.value]));
    expect(counts).toEqual({
      would_replay: 2,
      would_reject_mismatch: 1,
      would_reject_missing_key: 1,
    });
    expect(upstream.executions()).toHaveLength(5);
  });
});

describe('shadow mode while PostgreSQL is down', () => {
  const sent: SentResponse[] = [];
  let database: DisposablePostgres;
  let upstream: TestUpstream;
  let proxy: TestProxy;

  beforeAll(async () => {
    database = await createDisposablePostgres();
    await database.start();
    upstream = await recordingUpstream(sent);
    proxy = await startProxy({
      databaseUrl: database.url,
      yaml: `
store:
  table: \${TEST_TABLE}
upstreams:
  api: { url: ${upstream.url}, timeout: 5s }
routes:
  - name: shadow
    match: { method: POST, path: /shadow }
    upstream: api
    idempotency: { enforce: false }
  - name: enforced
    match: { method: POST, path: /enforced }
    upstream: api
    idempotency: {}
`,
    });
  }, 120_000);

  afterAll(async () => {
    await proxy?.close();
    await upstream?.close();
    await database?.dispose();
  });

  test('forwards every request and returns the upstream answer unchanged, logging would_reject_store_unavailable', async () => {
    const before = await postJson(`${proxy.url}/shadow`, 'outage-1', { a: 1 });
    expectUnaltered(sent, before);

    await database.stop();
    proxy.logs.length = 0;
    const enforced = await postJson(`${proxy.url}/enforced`, 'outage-2', { a: 1 });
    expect(enforced.status).toBe(503); // what enforcement does: fail closed
    const executions = upstream.executions().length;
    const during = [
      await postJson(`${proxy.url}/shadow`, 'outage-1', { a: 1 }),
      await postJson(`${proxy.url}/shadow`, 'outage-3', { a: 1 }),
      await postJson(`${proxy.url}/shadow`, undefined, { a: 1 }),
    ];
    for (const res of during) expectUnaltered(sent, res);
    expect(upstream.executions()).toHaveLength(executions + during.length);

    const lines = (await requestLines(proxy, 4)).filter((l) => l.route === 'shadow');
    expect(lines.map((l) => [l.key, l.shadow, l.outcome])).toEqual([
      ['outage-1', 'would_reject_store_unavailable', 'executed'],
      ['outage-3', 'would_reject_store_unavailable', 'executed'],
      [undefined, 'would_reject_missing_key', 'passthrough'],
    ]);
    expect(
      proxy.logs.some((l) => String(l.msg).startsWith('idempotency store operation failed')),
    ).toBe(true);
  }, 120_000);
});
