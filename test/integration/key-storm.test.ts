// A storm on one key must not hurt anyone else: 3000 concurrent duplicates of one key,
// whose first request takes 4 s upstream, and meanwhile a stream of requests with fresh keys on the
// same route. Repeats are answered from what this process's first request knows (local-keys.ts), so
// the storm holds no pool connections: one execution for the storm key, no 503 for anybody, and
// every fresh key executes once.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import { until } from '../support/eventually';
import { startProxy, type TestProxy } from '../support/proxy';
import { sleep, startUpstream, type TestUpstream } from '../support/upstream';
import { recordFigures } from '../support/run-report';

const STORM = 3000;
const FRESH = 20;
const WAVE = 250;

let upstream: TestUpstream;
let proxy: TestProxy;
let base: string;

beforeAll(async () => {
  upstream = await startUpstream(async (req, res) => {
    const key = String(req.headers['idempotency-key'] ?? '');
    if (key.startsWith('storm')) await sleep(4_000);
    if (key.startsWith('slow')) await sleep(1_500);
    // The first attempt of a "busy" key is answered 503 (in `release`): the upstream did not act.
    if (key.startsWith('busy') && executionsOf(key) === 1) {
      await sleep(1_000);
      res.writeHead(503, { 'content-type': 'application/json' });
      res.end('{"busy":true}');
      return;
    }
    res.writeHead(201, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ key: req.headers['idempotency-key'] }));
  });
  proxy = await startProxy({
    yaml: `
store: { table: "\${TEST_TABLE}", poolSize: 10 }
upstreams: { api: { url: ${upstream.url} } }
routes:
  - { name: reject, match: { path: /reject }, upstream: api, idempotency: { onConcurrent: reject } }
  - name: wait
    match: { path: /wait }
    upstream: api
    idempotency: { onConcurrent: wait, waitTimeout: 8s, maxWaitersPerKey: 1000 }
  - name: few
    match: { path: /few }
    upstream: api
    idempotency: { onConcurrent: wait, waitTimeout: 8s, maxWaitersPerKey: 5 }
`,
  });
  // Listen again with a backlog that holds a storm's connects (Node's default is 511): a connect
  // the kernel drops shows up as a reset or a SYN retry, not as anything the proxy answered.
  const server = proxy.app.server;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  await new Promise<void>((resolve) =>
    server.listen({ port: 0, host: '127.0.0.1', backlog: 4096 }, resolve),
  );
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  await proxy?.close();
  await upstream?.close();
});

// One socket per request, no pooling on the client side: every duplicate is a real connection.
const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity });

interface Answer {
  readonly status: number;
  readonly replayed: boolean;
  readonly ms: number;
}

function post(path: string, key: string): Promise<Answer> {
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const body = JSON.stringify({ amount: 5 });
    const req = http.request(
      `${base}${path}`,
      {
        method: 'POST',
        agent,
        headers: {
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(body),
          'idempotency-key': key,
        },
      },
      (res) => {
        res.resume();
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            replayed: res.headers['idempotent-replayed'] === 'true',
            ms: performance.now() - started,
          }),
        );
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

function percentile(values: readonly number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

function count(answers: readonly Answer[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const answer of answers) {
    const label = `${answer.status}${answer.replayed ? ' replayed' : ''}`;
    counts[label] = (counts[label] ?? 0) + 1;
  }
  return counts;
}

async function storm(path: string): Promise<{ storm: Answer[]; fresh: Answer[] }> {
  const key = `storm-${path.slice(1)}`;
  const first = post(path, key);
  // The first request holds the claim before the storm starts, as in the incident.
  await until(
    () => upstream.received.some((r) => r.headers['idempotency-key'] === key),
    'the first request to reach the upstream',
    { intervalMs: 10 },
  );
  // In waves of 250 connections, 20 ms apart: all 3000 are in flight together (the first takes 4
  // s), without overflowing the listen backlog, which would turn the test into one of SYN retries.
  const duplicates: Promise<Answer>[] = [];
  for (let sent = 1; sent < STORM; sent += WAVE) {
    for (let i = sent; i < Math.min(STORM, sent + WAVE); i++) duplicates.push(post(path, key));
    await sleep(20);
  }
  const fresh: Promise<Answer>[] = [];
  for (let i = 0; i < FRESH; i++) {
    fresh.push(post(path, `fresh-${path.slice(1)}-${i}`));
    await sleep(100);
  }
  return { storm: await Promise.all([first, ...duplicates]), fresh: await Promise.all(fresh) };
}

function executionsOf(key: string): number {
  return upstream.executions().filter((r) => r.headers['idempotency-key'] === key).length;
}

test.each([
  ['/reject', ['201', '201 replayed', '409']],
  ['/wait', ['201', '201 replayed', '409']],
])(
  '%s: 3000 duplicates of one key run once, nobody gets a 503, fresh keys each run once',
  async (path, allowed) => {
    const { storm: stormAnswers, fresh } = await storm(path);
    const counts = count(stormAnswers);
    expect(Object.keys(counts).filter((status) => !allowed.includes(status))).toEqual([]);
    expect(counts['201']).toBe(1);
    expect(executionsOf(`storm-${path.slice(1)}`)).toBe(1);
    expect(fresh.map((answer) => answer.status)).toEqual(Array(FRESH).fill(201));
    for (let i = 0; i < FRESH; i++) expect(executionsOf(`fresh-${path.slice(1)}-${i}`)).toBe(1);
    const storeFailures = proxy.logs.filter((line) =>
      String(line.msg).startsWith('idempotency store'),
    );
    expect(storeFailures).toEqual([]);
    const ms = fresh.map((answer) => answer.ms);
    recordFigures(__filename, `${path} storm`, {
      ...counts,
      freshP50Ms: Math.round(percentile(ms, 50)),
      freshP99Ms: Math.round(percentile(ms, 99)),
    });
  },
  120_000,
);

function linesFor(key: string): Record<string, unknown>[] {
  return proxy.logs.filter((line) => line.msg === 'request' && line.key === key);
}

/** Resolves once the upstream has received a request with this key. */
async function reachedUpstream(key: string): Promise<void> {
  await until(() => executionsOf(key) > 0, `${key} to reach the upstream`, { intervalMs: 10 });
}

test('repeats of a key this instance is forwarding are answered in memory: 409 with the lease it knows', async () => {
  const first = post('/reject', 'slow-reject');
  await reachedUpstream('slow-reject');
  const repeats = await Promise.all(
    Array.from({ length: 50 }, () => post('/reject', 'slow-reject')),
  );
  expect(repeats.map((answer) => answer.status)).toEqual(Array(50).fill(409));
  expect((await first).status).toBe(201);
  const lines = linesFor('slow-reject');
  expect(lines.filter((line) => line.coalesced === true)).toHaveLength(50);
  // Only the first request claimed: none of the repeats asked the store.
  expect(lines.filter((line) => line.attempts !== undefined)).toHaveLength(1);
  expect(executionsOf('slow-reject')).toBe(1);
});

test('a repeat with another payload while the first is forwarded here gets 422 without a round trip', async () => {
  const first = post('/reject', 'slow-other');
  await reachedUpstream('slow-other');
  const other = await new Promise<number>((resolve, reject) => {
    const body = JSON.stringify({ amount: 6 });
    http
      .request(
        `${base}/reject`,
        {
          method: 'POST',
          agent,
          headers: { 'content-type': 'application/json', 'idempotency-key': 'slow-other' },
        },
        (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        },
      )
      .on('error', reject)
      .end(body);
  });
  expect(other).toBe(422);
  expect((await first).status).toBe(201);
  expect(linesFor('slow-other').filter((line) => line.coalesced === true)).toHaveLength(1);
});

test('maxWaitersPerKey: five waiters join the first request and get its answer; the rest get 409', async () => {
  const first = post('/few', 'slow-few');
  await reachedUpstream('slow-few');
  const repeats = await Promise.all(Array.from({ length: 20 }, () => post('/few', 'slow-few')));
  expect((await first).status).toBe(201);
  expect(count(repeats)).toEqual({ '201 replayed': 5, '409': 15 });
  expect(executionsOf('slow-few')).toBe(1);
});

test('when the first request is released, one waiter runs it again and the others get that answer', async () => {
  const first = post('/wait', 'busy-1');
  await reachedUpstream('busy-1');
  const repeats = await Promise.all(Array.from({ length: 10 }, () => post('/wait', 'busy-1')));
  expect((await first).status).toBe(503);
  expect(executionsOf('busy-1')).toBe(2);
  expect(count(repeats)).toEqual({ '201': 1, '201 replayed': 9 });
});
