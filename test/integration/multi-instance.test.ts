// Several proxy processes on one PostgreSQL, and a proxy killed with -9 mid-request: correctness comes
// from the unique constraint and the lease, never from a process's memory.
import { until } from '../support/eventually';
import { postJson, type TestResponse } from '../support/http';
import { databaseUrl, uniqueTable } from '../support/proxy';
import { type ProxyProcess, startProxyProcess } from '../support/proxy-process';
import { sleep, startUpstream, type TestUpstream } from '../support/upstream';

let upstream: TestUpstream;

beforeAll(async () => {
  upstream = await startUpstream(async (req, res) => {
    await sleep(Number(req.headers['x-wait'] ?? 0));
    res.writeHead(201, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({
        execution: upstream.executions().length,
        key: req.headers['idempotency-key'],
      }),
    );
  });
});

afterAll(async () => {
  await upstream?.close();
});

beforeEach(() => {
  upstream.received.length = 0;
});

const config = (table: string, idempotency: string): string => `
listen:
  host: 127.0.0.1
  port: \${PROXY_PORT}
admin:
  port: \${ADMIN_PORT}
store:
  table: ${table}
  poolSize: 10
upstreams: { api: { url: ${upstream.url}, timeout: 10s } }
routes:
  - { name: orders, match: { path: /orders }, upstream: api, idempotency: ${idempotency} }
  - { name: retried, match: { path: /retried }, upstream: api, idempotency: { unknownOutcome: retry, lockTimeout: 4s } }
`;

async function twoProxies(
  table: string,
  idempotency: string,
): Promise<[ProxyProcess, ProxyProcess]> {
  const env = { DATABASE_URL: databaseUrl() };
  return Promise.all([
    startProxyProcess({ yaml: config(table, idempotency), env }),
    startProxyProcess({ yaml: config(table, idempotency), env }),
  ]);
}

function storm(proxies: ProxyProcess[], key: string, count: number): Promise<TestResponse[]> {
  return Promise.all(
    Array.from({ length: count }, (_, i) =>
      postJson(
        `${proxies[i % proxies.length]!.url}/orders`,
        key,
        { amount: 10 },
        { 'x-wait': '400' },
      ),
    ),
  );
}

test('200 duplicates split across two proxy processes execute once (reject: 409 or the stored response)', async () => {
  const proxies = await twoProxies(uniqueTable('multi'), '{ lockTimeout: 30s }');
  try {
    const responses = await storm(proxies, 'multi-reject', 200);
    expect(upstream.executions()).toHaveLength(1);
    const ok = responses.filter((r) => r.status === 201);
    expect(ok.length + responses.filter((r) => r.status === 409).length).toBe(200);
    expect(new Set(ok.map((r) => r.text())).size).toBe(1);
    const after = await Promise.all(
      proxies.map((p) => postJson(`${p.url}/orders`, 'multi-reject', { amount: 10 })),
    );
    for (const response of after) {
      expect(response.headers['idempotent-replayed']).toBe('true');
      expect(response.text()).toBe(ok[0]!.text());
    }
  } finally {
    await Promise.all(proxies.map((p) => p.kill()));
  }
}, 60_000);

test('200 duplicates split across two proxy processes execute once (wait: everyone gets the stored response)', async () => {
  const proxies = await twoProxies(
    uniqueTable('multi'),
    '{ onConcurrent: wait, waitTimeout: 10s, lockTimeout: 30s }',
  );
  try {
    const responses = await storm(proxies, 'multi-wait', 200);
    expect(upstream.executions()).toHaveLength(1);
    expect(responses.every((r) => r.status === 201)).toBe(true);
    expect(new Set(responses.map((r) => r.text())).size).toBe(1);
    expect(responses.filter((r) => r.headers['idempotent-replayed'] === undefined)).toHaveLength(1);
  } finally {
    await Promise.all(proxies.map((p) => p.kill()));
  }
}, 60_000);

const LEASE_MS = 6_000;

test('after kill -9 mid-request: 409 until lockTimeout, then fail replays an unknown outcome and retry takes over once', async () => {
  const table = uniqueTable('crash');
  const env = { DATABASE_URL: databaseUrl() };
  const yaml = config(table, `{ lockTimeout: ${LEASE_MS / 1000}s }`);
  // The survivor is up before the kill: the lease then has to outlast two requests, not a process
  // starting on a loaded machine, which once took longer than a 10 s lease (the second early
  // request was forwarded).
  const [doomed, survivor] = await Promise.all([
    startProxyProcess({ yaml, env }),
    startProxyProcess({ yaml, env }),
  ]);
  try {
    // Two requests in flight on the doomed proxy, one per unknownOutcome mode.
    const lost = [
      postJson(`${doomed.url}/orders`, 'crash-fail', { a: 1 }, { 'x-wait': '5000' }).catch(
        () => 'connection lost',
      ),
      postJson(`${doomed.url}/retried`, 'crash-retry', { a: 1 }, { 'x-wait': '5000' }).catch(
        () => 'connection lost',
      ),
    ];
    await until(() => upstream.executions().length >= 2, 'both requests to reach the upstream');
    const claimedAt = Date.now();
    expect(await doomed.kill('SIGKILL')).toBeNull();
    expect(await Promise.all(lost)).toEqual(['connection lost', 'connection lost']);

    const early = await postJson(`${survivor.url}/orders`, 'crash-fail', { a: 1 });
    expect(early.status).toBe(409);
    const earlyRetry = await postJson(`${survivor.url}/retried`, 'crash-retry', { a: 1 });
    expect(earlyRetry.status).toBe(409);
    await sleep(claimedAt + LEASE_MS + 300 - Date.now());

    const settled = await postJson(`${survivor.url}/orders`, 'crash-fail', { a: 1 });
    expect(settled.status).toBe(502);
    expect(settled.headers['idempotency-outcome']).toBe('unknown');
    expect(settled.json()).toMatchObject({
      code: 'IDEMPOTENCY_OUTCOME_UNKNOWN',
      key: 'crash-fail',
    });
    const settledAgain = await postJson(`${survivor.url}/orders`, 'crash-fail', { a: 1 });
    expect(settledAgain.body.equals(settled.body)).toBe(true);

    const takeovers = await Promise.all(
      Array.from({ length: 5 }, () => postJson(`${survivor.url}/retried`, 'crash-retry', { a: 1 })),
    );
    expect(takeovers.filter((r) => r.status === 201)).not.toHaveLength(0);
    const replay = await postJson(`${survivor.url}/retried`, 'crash-retry', { a: 1 });
    expect(replay.headers['idempotent-replayed']).toBe('true');

    const keys = upstream.executions().map((r) => r.headers['idempotency-key']);
    expect(keys.filter((k) => k === 'crash-fail')).toHaveLength(1);
    expect(keys.filter((k) => k === 'crash-retry')).toHaveLength(2); // the lost one, and one takeover
  } finally {
    await Promise.all([doomed.kill(), survivor.kill()]);
  }
}, 60_000);
