// `workers: 2`: one listener served by two processes (node:cluster), the built proxy run as users
// run it. Which worker answered is the `pid` of its request log line (worker lines carry it; no
// header tells a client). Every claim is proven at the upstream: one execution per key.
import fs from 'node:fs';
import { runCli, logLines } from '../support/cli-process';
import { eventually } from '../support/eventually';
import { postJson, send } from '../support/http';
import { startProxyProcess, type ProxyProcess } from '../support/proxy-process';
import { uniqueTable } from '../support/proxy';
import { sleep, startUpstream, type TestUpstream } from '../support/upstream';

let upstream: TestUpstream;
let proxy: ProxyProcess;
let yaml: string;
const table = uniqueTable('workers');
const TOKEN = 'workers-test-token';
let executions = 0;

const config = (extraRoutes = ''): string => `
listen: { host: 127.0.0.1, port: "\${PROXY_PORT}" }
admin: { host: 127.0.0.1, port: "\${ADMIN_PORT}", token: ${TOKEN} }
workers: 2
shutdownGrace: 30s
store: { table: ${table} }
upstreams: { api: { url: ${upstream.url} } }
routes:${extraRoutes}
  - { name: jobs, match: { method: POST, path: /jobs }, upstream: api, idempotency: { onConcurrent: wait } }
  - { name: slow, match: { method: POST, path: /slow }, upstream: api, idempotency: {} }
`;

beforeAll(async () => {
  upstream = await startUpstream(async (req, res) => {
    // Long enough that duplicates sent together overlap the first one's forward.
    await sleep(req.url === '/slow' ? 1_500 : 300);
    res.writeHead(201, { 'content-type': 'application/json' });
    executions++;
    res.end(JSON.stringify({ key: req.headers['idempotency-key'], url: req.url, executions }));
  });
  yaml = config();
  proxy = await startProxyProcess({ yaml, env: { LOG_FORMAT: 'json' } });
});

afterAll(async () => {
  await proxy?.kill('SIGKILL');
  await upstream?.close();
});

/** The worker pids whose request lines name `key`, once `count` of them were written. */
async function servedBy(key: string | RegExp, count: number): Promise<Set<number>> {
  return eventually(() => {
    const lines = logLines(proxy.output(), 'request').filter((line) =>
      typeof key === 'string' ? line.key === key : key.test(String(line.key)),
    );
    expect(lines).toHaveLength(count);
    return new Set(lines.map((line) => line.pid as number));
  });
}

function executionsOf(key: string): number {
  return upstream.executions().filter((r) => r.headers['idempotency-key'] === key).length;
}

function workerPids(): Set<number> {
  return new Set(
    logLines(proxy.output(), 'idempotency-proxy listening').map((line) => line.pid as number),
  );
}

/**
 * Sends a batch of requests at once (each on a connection of its own) until one batch reaches both
 * workers: connections are handed out in turn, but a worker slow to take one (the machine is busy)
 * lets the other take several. `batch` sends, checks what it must, and says which lines to read.
 */
async function acrossBothWorkers(
  batch: (run: string) => Promise<{ key: string | RegExp; count: number }>,
): Promise<Set<number>> {
  for (let attempt = 1; attempt <= 5; attempt++) {
    const { key, count } = await batch(`${Date.now()}-${attempt}`);
    const pids = await servedBy(key, count);
    if (pids.size === 2) return pids;
  }
  throw new Error('five batches in a row were all served by one worker');
}

/** `count` new keys `<run>-<i>` POSTed to `path` at once, each expected to execute (201). */
async function newKeys(path: string, run: string, count: number) {
  const responses = await Promise.all(
    Array.from({ length: count }, (_, i) => postJson(`${proxy.url}${path}`, `${run}-${i}`, { i })),
  );
  expect(responses.map((r) => r.status)).toEqual(Array(count).fill(201));
  return { key: new RegExp(`^${run}-`), count };
}

test('two workers take turns: requests on separate connections are served by both', async () => {
  const pids = await acrossBothWorkers((run) => newKeys('/jobs', `turns-${run}`, 8));
  expect(pids).not.toContain(proxy.child.pid);
  expect(pids).toEqual(workerPids());
});

test('duplicates sent together to both workers execute once, and every one gets that answer', async () => {
  // Until the duplicates of one key reached both processes: the one claim across them is PostgreSQL's.
  await acrossBothWorkers(async (run) => {
    const key = `dup-${run}`;
    const responses = await Promise.all(
      Array.from({ length: 12 }, () => postJson(`${proxy.url}/jobs`, key, { amount: 5 })),
    );
    expect(responses.map((r) => r.status)).toEqual(Array(12).fill(201));
    expect(new Set(responses.map((r) => r.text())).size).toBe(1);
    expect(executionsOf(key)).toBe(1);
    return { key, count: 12 };
  });
});

test("/metrics and the console's counters on the admin listener sum both workers'", async () => {
  const count = async (): Promise<number> => {
    const text = (await send(`${proxy.adminUrl}/metrics`, { method: 'GET' })).text();
    return [...text.matchAll(/^idempotency_proxy_requests_total\{route="jobs"[^}]*\} (\d+)$/gm)]
      .map((match) => Number(match[1]))
      .reduce((a, b) => a + b, 0);
  };
  const executed = async (): Promise<number> => {
    const counters = await send(`${proxy.adminUrl}/api/counters`, {
      method: 'GET',
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    return counters.json<{ totals: Record<string, number> }>().totals.executed ?? 0;
  };
  const before = await count();
  const executedBefore = await executed();
  let sent = 0;
  await acrossBothWorkers(async (run) => {
    sent += 10;
    return newKeys('/jobs', `metrics-${run}`, 10);
  });
  expect((await count()) - before).toBe(sent);
  expect((await executed()) - executedBefore).toBe(sent);
});

test('SIGHUP reaches every worker: a route added to the file answers on both', async () => {
  const added = `
  - { name: added, match: { method: POST, path: /added }, upstream: api, idempotency: {} }`;
  // The ports stay those of the running process (PROXY_PORT and ADMIN_PORT are in its environment).
  fs.writeFileSync(proxy.configFile, config(added));
  const reloadsBefore = logLines(proxy.output(), 'configuration reloaded').length;
  proxy.child.kill('SIGHUP');
  const reloaded = await eventually(() => {
    const lines = logLines(proxy.output(), 'configuration reloaded');
    expect(lines.length).toBe(reloadsBefore + 1);
    return lines.at(-1)!;
  });
  expect(reloaded).toMatchObject({ workers: 2, routes: 3 });
  await acrossBothWorkers((run) => newKeys('/added', `added-${run}`, 8));
});

test('a key cleared on the admin listener is forgotten by the replay cache of every worker', async () => {
  const key = `cleared-${Date.now()}`;
  /** One after the other, each on a new connection: the workers take turns. */
  const sequentially = async (count: number): Promise<string[]> => {
    const answers: string[] = [];
    for (let i = 0; i < count; i++) {
      const response = await postJson(`${proxy.url}/jobs`, key, { amount: 1 });
      answers.push(`${response.status} ${response.text()}`);
    }
    return answers;
  };
  const first = await sequentially(8);
  // Every status and body shown if one differs.
  expect(first).toEqual(Array(8).fill(first[0]));
  expect(first[0]).toMatch(/^201 /);
  await eventually(() => {
    const cached = logLines(proxy.output(), 'request').filter((l) => l.key === key && l.cached);
    expect(new Set(cached.map((line) => line.pid)).size).toBe(2);
  });
  const cleared = await send(`${proxy.adminUrl}/keys/jobs/${key}`, {
    method: 'DELETE',
    headers: { authorization: `Bearer ${TOKEN}` },
  });
  expect(cleared.status).toBe(200);
  expect(cleared.json()).toMatchObject({ workers: { asked: 2, forgot: 2, unconfirmed: [] } });
  // Every worker's cache dropped it before the clear answered: the next request executes again,
  // and no worker replays the first answer (workers-clear.test.ts races them harder).
  const after = await sequentially(6);
  expect(after).toEqual(Array(6).fill(after[0]));
  expect(after[0]).not.toBe(first[0]);
  expect(executionsOf(key)).toBe(2);
});

test('a worker killed with kill -9 is replaced: requests keep being served, by a new process', async () => {
  const [victim, survivor] = [...workerPids()];
  process.kill(victim!, 'SIGKILL');
  await eventually(() =>
    expect(proxy.output()).toContain(`worker (PID ${victim}) exited unexpectedly (signal SIGKILL)`),
  );
  // Served meanwhile by the survivor alone.
  const during = await postJson(`${proxy.url}/jobs`, `during-${Date.now()}`, {});
  expect(during.status).toBe(201);
  await eventually(
    async () => {
      const ready = (await send(`${proxy.adminUrl}/readyz`, { method: 'GET' })).json();
      expect(ready.workers).toEqual({ configured: 2, serving: 2 });
    },
    { timeoutMs: 30_000 },
  );
  // Its "listening" line may still be in its log batch (written within 100 ms).
  const replacement = await eventually(() => {
    const pid = [...workerPids()].find((p) => p !== victim && p !== survivor);
    expect(pid).toBeDefined();
    return pid;
  });
  expect(await acrossBothWorkers((run) => newKeys('/jobs', `after-${run}`, 8))).toEqual(
    new Set([survivor, replacement]),
  );
});

test('SIGTERM drains every worker: requests in flight complete, then all exit, code 0', async () => {
  const run = `drain-${Date.now()}`;
  // One slow request on each worker (two connections, taken in turn).
  const inFlight = [0, 1].map((i) => postJson(`${proxy.url}/slow`, `${run}-${i}`, {}));
  await eventually(() =>
    expect(upstream.received.filter((r) => r.url === '/slow').length).toBeGreaterThanOrEqual(2),
  );
  const exit = proxy.kill('SIGTERM');
  const responses = await Promise.all(inFlight);
  expect(responses.map((r) => r.status)).toEqual([201, 201]);
  expect(await exit).toBe(0);
  const output = proxy.output();
  expect(logLines(output, 'worker stopped')).toHaveLength(2);
  expect(output).toContain('"msg":"stopped"');
  for (const pid of workerPids()) expect(() => process.kill(pid, 0)).toThrow();
});

describe('config', () => {
  test.each([
    ['0', 'workers: 0'],
    ['"x"', 'workers: "x"'],
  ])('workers: %s is refused with its file and line, exit code 2', async (_, line) => {
    const file = `${fs.mkdtempSync('/tmp/ip-workers-')}/proxy.yaml`;
    fs.writeFileSync(file, `${line}\n${yaml.replace('workers: 2\n', '')}`);
    const result = await runCli(['serve', '--config', file], {
      env: { PROXY_PORT: '0', ADMIN_PORT: '0' },
    });
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(
      `${file}:1:10 workers: expected "auto" (one per core) or a number of processes from 1 to 1024`,
    );
  });
});
