// What a client sees (README.md#what-a-client-sees-on-a-protected-route), the rows where something
// goes wrong: released statuses, unreachable or failing upstreams, unknown outcomes (fail and
// retry), a crashed holder's lease, oversized responses.
import { once } from 'node:events';
import http from 'node:http';
import { performance } from 'node:perf_hooks';
import { PostgresKeyStore } from '../../src/store/postgres/key-store';
import { until } from '../support/eventually';
import { postJson, send } from '../support/http';
import { startProxy, type TestProxy } from '../support/proxy';
import { sleep, startUpstream, type TestUpstream } from '../support/upstream';

let upstream: TestUpstream;
let proxy: TestProxy;
const STREAM_CHUNK = 64 * 1024;
let streamFinishedAt = 0;

beforeAll(async () => {
  upstream = await startUpstream(async (req, res, raw) => {
    const url = new URL(req.url, 'http://x');
    const status = Number(url.searchParams.get('status') ?? 200);
    const wait = Number(url.searchParams.get('wait') ?? req.headers['x-wait'] ?? 0);
    if (wait) await sleep(wait);
    if (url.searchParams.has('drop')) {
      raw.socket.destroy();
      return;
    }
    if (url.searchParams.has('cut')) {
      res.writeHead(200, { 'content-type': 'text/plain', 'content-length': '100' });
      res.write('only part');
      setTimeout(() => raw.socket.destroy(), 20);
      return;
    }
    if (url.searchParams.has('stream')) {
      // Chunk after chunk, as fast as the proxy takes them: only backpressure can hold this back.
      const chunks = Number(url.searchParams.get('stream'));
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      for (let i = 0; i < chunks; i++) {
        if (!res.write(Buffer.alloc(STREAM_CHUNK, i % 251))) await once(res, 'drain');
      }
      res.end(() => (streamFinishedAt = performance.now()));
      return;
    }
    if (url.searchParams.has('large')) {
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'x-large': 'yes' });
      res.end(Buffer.alloc(Number(url.searchParams.get('large')), 'x'));
      return;
    }
    res.writeHead(status, { 'content-type': 'text/plain', 'set-cookie': 'session=abc; Path=/' });
    res.end(`status:${status} n:${upstream.executions().length}`);
  });
  proxy = await startProxy({
    yaml: `
store: { table: "\${TEST_TABLE}" }
upstreams:
  api: { url: ${upstream.url}, timeout: 400ms } # undici's timers fire up to ~1 s late: waits below use 2.5 s
  dead: { url: http://127.0.0.1:1 }
  slow: { url: ${upstream.url}, timeout: 5s }
defaults:
  maxResponseBytes: 1kb
  lockTimeout: 2s
routes:
  - name: ops
    match: { path: /ops }
    upstream: api
    idempotency: {}
  - name: only-2xx
    match: { path: /only-2xx }
    upstream: api
    idempotency: { store: ["2xx"] }
  - name: retrying
    match: { path: /retrying }
    upstream: api
    idempotency: { unknownOutcome: retry, lockTimeout: 3s }
  - name: dead
    match: { path: /dead }
    upstream: dead
    idempotency: {}
  - name: short-ttl
    match: { path: /short-ttl }
    upstream: slow
    idempotency: { ttl: 300ms, lockTimeout: 250ms }
  - name: cookies
    match: { path: /cookies }
    upstream: api
    idempotency: { replaySetCookie: true }
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

const rowFor = async (key: string) =>
  (await proxy.pool.query(`SELECT * FROM ${proxy.table} WHERE key = $1`, [key])).rows[0] as
    Record<string, unknown> | undefined;

test('returns a released status and drops the claim, so a retry executes again', async () => {
  const first = await postJson(`${proxy.url}/ops?status=503`, 'release-1', {});
  expect(first.status).toBe(503);
  expect(first.text()).toBe('status:503 n:1');
  expect(await rowFor('release-1')).toBeUndefined();
  const retry = await postJson(`${proxy.url}/ops?status=503`, 'release-1', {});
  expect(retry.status).toBe(503);
  expect(retry.headers['idempotent-replayed']).toBeUndefined();
  expect(upstream.executions()).toHaveLength(2);
});

test('stores and replays 4xx and 5xx answers by default', async () => {
  for (const status of [404, 500]) {
    const key = `stored-${status}`;
    const first = await postJson(`${proxy.url}/ops?status=${status}`, key, {});
    const again = await postJson(`${proxy.url}/ops?status=${status}`, key, {});
    expect(first.status).toBe(status);
    expect(again.status).toBe(status);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.body.equals(first.body)).toBe(true);
  }
  expect(upstream.executions()).toHaveLength(2);
});

test('drops the claim for a status the route does not store', async () => {
  await postJson(`${proxy.url}/only-2xx?status=500`, 'not-stored-1', {});
  const retry = await postJson(`${proxy.url}/only-2xx?status=500`, 'not-stored-1', {});
  expect(retry.headers['idempotent-replayed']).toBeUndefined();
  expect(upstream.executions()).toHaveLength(2);
});

test('answers 502 when the upstream is unreachable and drops the claim, so a retry executes', async () => {
  const first = await postJson(`${proxy.url}/dead`, 'dead-1', {});
  expect(first.status).toBe(502);
  expect(first.json()).toMatchObject({
    code: 'UPSTREAM_UNREACHABLE',
    key: 'dead-1',
    route: 'dead',
  });
  expect(first.headers['idempotency-outcome']).toBeUndefined();
  expect(await rowFor('dead-1')).toBeUndefined();
  const retry = await postJson(`${proxy.url}/dead`, 'dead-1', {});
  expect(retry.status).toBe(502); // tried again, not a 409 or a replay
  expect(retry.headers['idempotent-replayed']).toBeUndefined();
});

test('stores a 504 with Idempotency-Outcome: unknown when the upstream times out (unknownOutcome: fail)', async () => {
  const first = await postJson(`${proxy.url}/ops?wait=2500`, 'timeout-1', {});
  expect(first.status).toBe(504);
  expect(first.headers['idempotency-outcome']).toBe('unknown');
  expect(first.json()).toMatchObject({ code: 'UPSTREAM_TIMEOUT', key: 'timeout-1' });
  // What becomes of the key, and the command that lets it run again (the admin API is off here).
  expect(first.json().detail).toContain(
    'This answer is stored: every repeat with this key gets it, and nothing is forwarded again. Check the upstream; if the request must run, have an operator clear the key: idempotency-proxy clear ops KEY, or DELETE /api/records on the admin API.',
  );
  const repeat = await postJson(`${proxy.url}/ops?wait=2500`, 'timeout-1', {});
  expect(repeat.status).toBe(504);
  expect(repeat.headers['idempotency-outcome']).toBe('unknown');
  expect(repeat.headers['idempotent-replayed']).toBe('true');
  expect(repeat.body.equals(first.body)).toBe(true);
  await sleep(2_000); // let the slow upstream finish its (single) execution
  expect(upstream.executions()).toHaveLength(1);
  expect(await rowFor('timeout-1')).toMatchObject({
    state: 'completed',
    outcome_unknown: true,
    status: 504,
  });
});

test('stores a 502 unknown outcome when the upstream drops the connection after the request was sent', async () => {
  const first = await postJson(`${proxy.url}/ops?drop=1`, 'drop-1', {});
  expect(first.status).toBe(502);
  expect(first.json()).toMatchObject({ code: 'UPSTREAM_CONNECTION_LOST' });
  expect(first.headers['idempotency-outcome']).toBe('unknown');
  const repeat = await postJson(`${proxy.url}/ops?drop=1`, 'drop-1', {});
  expect(repeat.status).toBe(502);
  expect(repeat.headers['idempotent-replayed']).toBe('true');
  expect(upstream.executions()).toHaveLength(1);
});

test('treats a response body cut off mid-stream as an unknown outcome', async () => {
  const first = await postJson(`${proxy.url}/ops?cut=1`, 'cut-1', {});
  expect(first.status).toBe(502);
  expect(first.headers['idempotency-outcome']).toBe('unknown');
  const repeat = await postJson(`${proxy.url}/ops?cut=1`, 'cut-1', {});
  expect(repeat.headers['idempotent-replayed']).toBe('true');
  expect(upstream.executions()).toHaveLength(1);
});

test('under unknownOutcome: retry, keeps the claim after a timeout and lets one repeat take over after the lease', async () => {
  // x-wait is not part of the fingerprint: the same request, slow the first time only.
  const claimedAt = Date.now();
  const first = await postJson(
    `${proxy.url}/retrying`,
    'takeover-1',
    { v: 1 },
    { 'x-wait': '2500' },
  );
  expect(first.status).toBe(504);
  expect(first.headers['idempotency-outcome']).toBe('unknown');
  expect(first.json().detail).toContain(
    'A repeat with the same key after the lease (lockTimeout) forwards it again, with the same key.',
  );
  const during = await postJson(`${proxy.url}/retrying`, 'takeover-1', { v: 1 });
  expect(during.status).toBe(409);
  await sleep(claimedAt + 3_200 - Date.now()); // lockTimeout is 3s
  const takeover = await postJson(`${proxy.url}/retrying`, 'takeover-1', { v: 1 });
  expect(takeover.status).toBe(200);
  expect(takeover.headers['idempotent-replayed']).toBeUndefined();
  const replay = await postJson(`${proxy.url}/retrying`, 'takeover-1', { v: 1 });
  expect(replay.headers['idempotent-replayed']).toBe('true');
  expect(replay.body.equals(takeover.body)).toBe(true);
  expect(upstream.executions().map((r) => r.headers['idempotency-key'])).toEqual([
    'takeover-1',
    'takeover-1',
  ]);
  expect(await rowFor('takeover-1')).toMatchObject({ state: 'completed', fence: '2', status: 200 });
});

test("replays an unknown outcome once a crashed holder's lease ends (unknownOutcome: fail)", async () => {
  // A proxy that claimed the key and died: the claim exists, nothing completes it.
  const store = new PostgresKeyStore(proxy.pool, proxy.table);
  const body = JSON.stringify({ n: 1 });
  const { computeFingerprint } = await import('../../src/idempotency/fingerprint');
  const route = proxy.config.routes.find((r) => r.name === 'ops')!;
  const fingerprint = computeFingerprint(
    {
      method: 'POST',
      path: '/ops',
      query: '',
      headers: {},
      body: Buffer.from(body),
      contentType: 'application/json',
    },
    route.idempotency!.fingerprint,
  );
  const claim = await store.claim({
    id: { scope: 'ops', tenant: '', key: 'crash-1' },
    route: 'ops',
    fingerprint,
    leaseMs: 500,
    claimExpiryMs: 60_000,
  });
  expect(claim.kind).toBe('claimed');
  const during = await send(`${proxy.url}/ops`, {
    headers: { 'content-type': 'application/json', 'idempotency-key': 'crash-1' },
    body,
  });
  expect(during.status).toBe(409);
  await sleep(600);
  const after = await send(`${proxy.url}/ops`, {
    headers: { 'content-type': 'application/json', 'idempotency-key': 'crash-1' },
    body,
  });
  expect(after.status).toBe(502);
  expect(after.headers['idempotency-outcome']).toBe('unknown');
  expect(after.json()).toMatchObject({ code: 'IDEMPOTENCY_OUTCOME_UNKNOWN', key: 'crash-1' });
  // What to do names a command that exists, for a config whose admin API is off.
  expect(after.json().detail).toContain(
    'have an operator clear the key: idempotency-proxy clear ops KEY, or DELETE /api/records on the admin API.',
  );
  const again = await send(`${proxy.url}/ops`, {
    headers: { 'content-type': 'application/json', 'idempotency-key': 'crash-1' },
    body,
  });
  expect(again.body.equals(after.body)).toBe(true);
  expect(upstream.executions()).toHaveLength(0);
});

test('a first request still running past its ttl is not taken for expired: a repeat after the lease gets the unknown outcome', async () => {
  // ttl 300 ms, lease 250 ms, the upstream takes 2 s. 400 ms after the upstream has the request the
  // claim is older than the ttl and the lease, but its holder is still running it: the repeat must
  // settle it as unknown, not run it again. Timed from the upstream's side, not from the send: a
  // busy machine may take a few hundred milliseconds to claim.
  const first = postJson(`${proxy.url}/short-ttl?wait=2000`, 'slow-short-ttl', { n: 1 });
  await until(() => upstream.executions().length === 1, 'the upstream to have the first request');
  await sleep(400);
  const repeat = await postJson(`${proxy.url}/short-ttl?wait=2000`, 'slow-short-ttl', { n: 1 });
  expect(repeat.status).toBe(502);
  expect(repeat.headers['idempotency-outcome']).toBe('unknown');
  expect(repeat.json()).toMatchObject({ code: 'IDEMPOTENCY_OUTCOME_UNKNOWN' });
  expect((await first).status).toBe(200);
  expect(upstream.executions()).toHaveLength(1);
});

test('delivers a response over maxResponseBytes in full and replays it without a body', async () => {
  const first = await postJson(`${proxy.url}/ops?large=5000`, 'large-1', {});
  expect(first.status).toBe(200);
  expect(first.body.length).toBe(5000);
  expect(first.headers['x-large']).toBe('yes');
  const replay = await postJson(`${proxy.url}/ops?large=5000`, 'large-1', {});
  expect(replay.status).toBe(200);
  expect(replay.body.length).toBe(0);
  expect(replay.headers['idempotent-body-omitted']).toBe('true');
  expect(replay.headers['idempotent-replayed']).toBe('true');
  expect(replay.headers['x-large']).toBe('yes');
  expect(replay.headers['content-length']).toBe('0');
  expect(upstream.executions()).toHaveLength(1);
  // A response of exactly the limit is stored whole.
  await postJson(`${proxy.url}/ops?large=1024`, 'large-2', {});
  const whole = await postJson(`${proxy.url}/ops?large=1024`, 'large-2', {});
  expect(whole.body.length).toBe(1024);
  expect(whole.headers['idempotent-body-omitted']).toBeUndefined();
});

test('a streamed response waits for a slow client: the upstream is held back, not buffered', async () => {
  const chunks = 512; // 32 MiB: far more than the socket buffers between upstream, proxy and client
  const url = new URL(`${proxy.url}/ops?stream=${chunks}`);
  let resumedAt = 0;
  const received = await new Promise<Buffer[]>((resolve, reject) => {
    const req = http.request(url, {
      method: 'POST',
      headers: { 'idempotency-key': 'stream-1', 'content-type': 'application/json' },
    });
    req.on('error', reject);
    req.on('response', (res) => {
      const parts: Buffer[] = [];
      res.once('data', (first: Buffer) => {
        parts.push(first);
        res.pause();
        setTimeout(() => {
          resumedAt = performance.now();
          res.on('data', (chunk: Buffer) => parts.push(chunk));
          res.resume();
        }, 1_000);
      });
      res.on('end', () => resolve(parts));
      res.on('error', reject);
    });
    req.end('{}');
  });
  const body = Buffer.concat(received);
  expect(body.length).toBe(chunks * STREAM_CHUNK);
  for (let i = 0; i < chunks; i++) expect(body[i * STREAM_CHUNK + 1]).toBe(i % 251);
  // Without backpressure the proxy would have read all 32 MiB while the client was paused.
  expect(streamFinishedAt).toBeGreaterThan(resumedAt);
  expect(upstream.executions()).toHaveLength(1);
});

test('does not store Set-Cookie unless the route asks for it', async () => {
  const first = await postJson(`${proxy.url}/ops`, 'cookie-1', {});
  expect(first.headers['set-cookie']).toEqual(['session=abc; Path=/']);
  const replay = await postJson(`${proxy.url}/ops`, 'cookie-1', {});
  expect(replay.headers['set-cookie']).toBeUndefined();
  await postJson(`${proxy.url}/cookies`, 'cookie-2', {});
  const kept = await postJson(`${proxy.url}/cookies`, 'cookie-2', {});
  expect(kept.headers['set-cookie']).toEqual(['session=abc; Path=/']);
});

test('keeps forwarding and stores the result when the client hangs up mid-request', async () => {
  const http = await import('node:http');
  await new Promise<void>((resolve) => {
    const req = http.request(`${proxy.url}/ops?wait=200`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'idempotency-key': 'hangup-1',
        'content-length': '2',
      },
    });
    req.on('error', () => resolve());
    req.end('{}');
    setTimeout(() => {
      req.destroy();
      resolve();
    }, 50);
  });
  await sleep(400);
  expect(upstream.executions()).toHaveLength(1);
  const retry = await postJson(`${proxy.url}/ops?wait=200`, 'hangup-1', {});
  expect(retry.headers['idempotent-replayed']).toBe('true');
  expect(upstream.executions()).toHaveLength(1);
});

test('a connection the upstream resets as soon as it accepts is an unknown outcome, stored once (at most once)', async () => {
  // Once a TCP connection is up, the proxy cannot prove the request bytes were not read: it does
  // not guess "nothing sent". The upstream application here never sees the request (count 0).
  const net = await import('node:net');
  const resetter = net.createServer((socket) => socket.resetAndDestroy());
  await new Promise<void>((resolve) => resetter.listen(0, '127.0.0.1', resolve));
  const port = (resetter.address() as { port: number }).port;
  const resetProxy = await startProxy({
    yaml: `
store:
  table: \${TEST_TABLE}
upstreams: { reset: { url: http://127.0.0.1:${port} } }
routes:
  - { name: reset, match: { path: /reset }, upstream: reset, idempotency: {} }
`,
  });
  try {
    const first = await postJson(`${resetProxy.url}/reset`, 'reset-1', {});
    expect(first.status).toBe(502);
    expect(first.headers['idempotency-outcome']).toBe('unknown');
    expect(first.json()).toMatchObject({ code: 'UPSTREAM_CONNECTION_LOST' });
    const retry = await postJson(`${resetProxy.url}/reset`, 'reset-1', {});
    expect(retry.headers['idempotent-replayed']).toBe('true');
    expect(retry.body.equals(first.body)).toBe(true);
  } finally {
    await resetProxy.close();
    resetter.close();
  }
});
