// An admin clear on a `workers: 2` proxy: it answers only once every worker's replay cache forgot
// the record, so no repeat sent after the answer is replayed the cleared answer from a worker's
// memory. The built proxy, run as users run it; which worker answered, and whether from memory, is
// its request log line (`pid`, `cached`). The upstream counts executions: every answer it gives
// names its execution, so a stale replay is told apart from the fresh one by its body.
//
// The clear's NOTIFY still reaches the workers' LISTEN connections; on an idle machine it usually
// beats the client's next request, under load it does not. So that the test fails whenever the
// clear relies on it, the workers' LISTEN connections reach PostgreSQL through a forwarder that
// delivers what the server sends them LISTEN_LAG_MS late (every other connection without delay).
import http from 'node:http';
import { FORGET_TIMEOUT_MS } from '../../src/cluster/cluster-forget';
import { logLines } from '../support/cli-process';
import { eventually } from '../support/eventually';
import { postJson, send, type TestResponse } from '../support/http';
import { startProxyProcess, type ProxyProcess } from '../support/proxy-process';
import { databaseUrl, uniqueTable } from '../support/proxy';
import { type LaggingForwarder, startLaggingForwarder } from '../support/lagging-forwarder';
import { sleep, startUpstream, type TestUpstream } from '../support/upstream';

let upstream: TestUpstream;
let proxy: ProxyProcess;
let forwarder: LaggingForwarder;
/** How late the workers' LISTEN connections hear a NOTIFY (their probes stay well within 2 s). */
const LISTEN_LAG_MS = 400;
const table = uniqueTable('workers_clear');
const TOKEN = 'workers-clear-token';
/** Repeats sent at once the moment a clear answers. */
const REPEATS = 50;
let executions = 0;

beforeAll(async () => {
  upstream = await startUpstream(async (req, res) => {
    // Long enough that the repeats sent together overlap the one execution (they wait for it).
    await sleep(200);
    executions++;
    res.writeHead(201, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ key: req.headers['idempotency-key'], execution: executions }));
  });
  const url = new URL(databaseUrl());
  forwarder = await startLaggingForwarder(
    { host: url.hostname, port: Number(url.port || 5432) },
    LISTEN_LAG_MS,
    (applicationName) => applicationName === 'idempotency-proxy-listener',
  );
  url.hostname = '127.0.0.1';
  url.port = String(forwarder.port);
  proxy = await startProxyProcess({
    yaml: `
listen: { host: 127.0.0.1, port: "\${PROXY_PORT}" }
admin: { host: 127.0.0.1, port: "\${ADMIN_PORT}", token: ${TOKEN} }
workers: 2
store: { table: ${table} }
upstreams: { api: { url: ${upstream.url} } }
routes:
  - { name: jobs, match: { method: POST, path: /jobs }, upstream: api, idempotency: { onConcurrent: wait } }
`,
    env: { LOG_FORMAT: 'json', DATABASE_URL: url.toString() },
  });
});

afterAll(async () => {
  await proxy?.kill('SIGKILL');
  await upstream?.close();
  await forwarder?.close();
});

function executionsOf(key: string): number {
  return upstream.executions().filter((r) => r.headers['idempotency-key'] === key).length;
}

function requestLines(key: string): Record<string, unknown>[] {
  return logLines(proxy.output(), 'request').filter((line) => line.key === key);
}

function workerPids(): number[] {
  return [
    ...new Set(
      logLines(proxy.output(), 'idempotency-proxy listening').map((line) => line.pid as number),
    ),
  ];
}

/**
 * Stores `key`'s answer, then repeats it one request after another (each on a new connection: the
 * workers take turns) until each worker has answered it from memory at least twice.
 */
async function cachedInBothWorkers(key: string): Promise<string> {
  const first = await postJson(`${proxy.url}/jobs`, key, { amount: 1 });
  expect(first.status).toBe(201);
  let sent = 1;
  await eventually(
    async () => {
      const repeat = await postJson(`${proxy.url}/jobs`, key, { amount: 1 });
      sent++;
      expect(repeat.text()).toBe(first.text());
      const fromMemory = requestLines(key).filter((line) => line.cached === true);
      const perWorker = workerPids().map(
        (pid) => fromMemory.filter((line) => line.pid === pid).length,
      );
      expect(perWorker).toEqual([expect.any(Number), expect.any(Number)]);
      expect(Math.min(...perWorker)).toBeGreaterThanOrEqual(2);
    },
    { timeoutMs: 20_000, intervalMs: 0 },
  );
  expect(executionsOf(key)).toBe(1);
  // Every one of them logged (lines are written in batches), so the lines that follow are new.
  await eventually(() => expect(requestLines(key)).toHaveLength(sent));
  return first.text();
}

function clear(key: string): Promise<TestResponse> {
  return send(`${proxy.adminUrl}/keys/jobs/${key}`, {
    method: 'DELETE',
    headers: { authorization: `Bearer ${TOKEN}` },
  });
}

test(`a clear answers once both workers forgot the record: none of ${REPEATS} repeats sent right after it is replayed the cleared answer`, async () => {
  const key = `cleared-${Date.now()}`;
  const old = await cachedInBothWorkers(key);
  const linesBefore = requestLines(key).length;
  // The repeats' connections are open before the clear, as a client's pool keeps them: handed to
  // the workers in turn, and a request on one reaches its worker at once.
  const agent = new http.Agent({ keepAlive: true, maxSockets: REPEATS });
  const warmUps = await Promise.all(
    Array.from({ length: REPEATS }, () => send(`${proxy.url}/warm-up`, { method: 'GET', agent })),
  );
  expect(new Set(warmUps.map((r) => r.status))).toEqual(new Set([404]));
  expect(Object.values(agent.freeSockets).flat()).toHaveLength(REPEATS);

  const cleared = await clear(key);
  const repeats = await Promise.all(
    Array.from({ length: REPEATS }, () =>
      postJson(`${proxy.url}/jobs`, key, { amount: 1 }, {}, agent),
    ),
  );
  agent.destroy();

  expect(cleared.status).toBe(200);
  const stale = repeats.filter((r) => r.text() === old).length;
  expect({ stale, statuses: [...new Set(repeats.map((r) => r.status))] }).toEqual({
    stale: 0,
    statuses: [201],
  });
  expect(cleared.json()).toMatchObject({
    deleted: true,
    scope: 'jobs',
    key,
    workers: { asked: 2, forgot: 2, unconfirmed: [] },
  });
  // Exactly one more execution, and every repeat got its answer.
  expect(executionsOf(key)).toBe(2);
  expect(new Set(repeats.map((r) => r.text())).size).toBe(1);
  // The repeats reached both workers (connections are handed out in turn).
  const after = await eventually(() => {
    const lines = requestLines(key).slice(linesBefore);
    expect(lines).toHaveLength(REPEATS);
    return lines;
  });
  expect(new Set(after.map((line) => line.pid))).toEqual(new Set(workerPids()));
});

test("a worker that does not confirm in time does not hold the clear: it answers, naming that worker, and the worker forgets once it hears the clear's NOTIFY", async () => {
  const key = `unconfirmed-${Date.now()}`;
  const old = await cachedInBothWorkers(key);
  const [frozen] = workerPids();
  // A stopped process: connected, listening, but answering nothing.
  process.kill(frozen!, 'SIGSTOP');
  let cleared: TestResponse;
  const startedAt = performance.now();
  try {
    cleared = await clear(key);
  } finally {
    process.kill(frozen!, 'SIGCONT');
  }
  const tookMs = performance.now() - startedAt;

  expect(cleared.status).toBe(200);
  expect(cleared.json()).toMatchObject({
    deleted: true,
    workers: {
      asked: 2,
      forgot: 1,
      unconfirmed: [{ workerPid: frozen, reason: expect.stringMatching(/no answer within/) }],
    },
  });
  // The bounded wait: the answer came once the deadline passed, not much later.
  expect(tookMs).toBeGreaterThanOrEqual(FORGET_TIMEOUT_MS);
  expect(tookMs).toBeLessThan(FORGET_TIMEOUT_MS + 5_000);
  const warned = await eventually(() => {
    const line = logLines(proxy.output(), 'admin: cleared a record').find((l) => l.key === key);
    expect(line).toBeDefined();
    return line;
  });
  expect(warned).toMatchObject({ level: 40, workers: 2, unconfirmedWorkers: [frozen] });

  // Awake again, the frozen worker hears the NOTIFY: no worker replays the cleared answer.
  await eventually(
    async () => {
      const repeats = await Promise.all(
        Array.from({ length: 10 }, () => postJson(`${proxy.url}/jobs`, key, { amount: 1 })),
      );
      expect(repeats.filter((r) => r.text() === old)).toHaveLength(0);
    },
    { timeoutMs: 15_000 },
  );
  expect(executionsOf(key)).toBe(2);
});
