// The spool (store.outbox.spool): answers a client got while PostgreSQL was away survive the proxy.
// Real `serve` processes whose every connection to PostgreSQL goes through a way the test cuts;
// an upstream that counts its executions per key. Each case: the clients got their 201s during the
// outage, then the process ended (kill -9, or a SIGTERM whose drain outlasted its bound), then a
// new process on the same spool, with PostgreSQL back, must replay every 201 (and run nothing
// twice). Also: the memory bound spills to the spool instead of dropping, a full spool holds answers
// back and refuses new claims, a torn spool file, a spool in use, a spool others can read, workers.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { cuttableDatabase, type CuttableDatabase } from '../support/cuttable-database';
import { until } from '../support/eventually';
import {
  answeredDuringCut,
  keysOf,
  order,
  retryPast503,
  untilUpstreamHas,
} from '../support/outage-orders';
import { startProxyProcess, type ProxyProcess } from '../support/proxy-process';
import { startProxy, type TestProxy, uniqueTable } from '../support/proxy';
import { type CountingUpstream, sleep, startSlowCountingUpstream } from '../support/upstream';
import { serverUserIds } from '../support/pg-cluster';

const LEASE_MS = 1_500;
const UPSTREAM_MS = 1_000;

let upstream: CountingUpstream;
let database: CuttableDatabase;
const processes: ProxyProcess[] = [];
const dirs: string[] = [];

beforeAll(async () => {
  // Answers of some size, so that bounds in bytes mean something.
  upstream = await startSlowCountingUpstream(UPSTREAM_MS, 2_000);
  database = await cuttableDatabase();
});

afterEach(async () => {
  database.restore();
  // SIGTERM: a cluster's primary takes its workers down with it.
  for (const proxy of processes.splice(0)) {
    const stopped = await Promise.race([proxy.kill('SIGTERM').then(() => true), sleep(20_000)]);
    if (stopped !== true) await proxy.kill('SIGKILL');
  }
});

afterAll(async () => {
  await upstream?.close();
  await database?.close();
  for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true });
});

function tempDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ip-spool-test-'));
  dirs.push(dir);
  return dir;
}

interface ServeOptions {
  readonly table: string;
  /** store.outbox.spool: a directory, or false. */
  readonly spool: string | false;
  readonly outbox?: string;
  readonly workers?: number;
}

function yamlFor({ table, spool, outbox = '', workers = 1 }: ServeOptions): string {
  return `
listen: { port: "\${PROXY_PORT}" }
admin: { port: "\${ADMIN_PORT}" }
workers: ${workers}
store:
  table: ${table}
  outbox: { holdAnswer: 300ms, spool: ${spool === false ? 'false' : JSON.stringify(spool)}${outbox} }
upstreams: { api: { url: ${upstream.url}, timeout: 10s } }
routes:
  - name: orders
    match: { method: POST, path: /orders }
    upstream: api
    idempotency: { lockTimeout: ${LEASE_MS}ms, unknownOutcome: fail }
`;
}

async function serve(options: ServeOptions): Promise<ProxyProcess> {
  const proxy = await startProxyProcess({
    yaml: yamlFor(options),
    env: { DATABASE_URL: database.url },
  });
  processes.push(proxy);
  return proxy;
}

/** Sends `keys` and cuts PostgreSQL off while their upstream calls run; the answers' bodies. */
async function answeredDuringOutage(
  url: string,
  keys: readonly string[],
): Promise<Map<string, string>> {
  const firsts = await answeredDuringCut(upstream, [[url, keys]], () => database.cut());
  return new Map([...firsts].map(([key, res]) => [key, res.text()]));
}

/** Every key replays what its first client got, and ran once upstream. */
async function expectReplayed(url: string, firsts: ReadonlyMap<string, string>): Promise<void> {
  for (const [key, body] of firsts) {
    const replay = await retryPast503(url, key);
    expect({ key, status: replay.status, body: replay.text() }).toEqual({ key, status: 201, body });
    expect({ key, runs: upstream.runs(key) }).toEqual({ key, runs: 1 });
  }
}

test('kill -9 during an outage, with a spool: the next start stores the answers, and replays them', async () => {
  const spool = tempDir();
  const table = uniqueTable('spool');
  const first = await serve({ table, spool });
  const firsts = await answeredDuringOutage(first.url, keysOf('kill'));
  await first.kill('SIGKILL');
  // On disk, private: the folder 0700 and the file 0600.
  expect(fs.statSync(spool).mode & 0o777).toBe(0o700);
  expect(fs.statSync(path.join(spool, 'spool.log')).mode & 0o777).toBe(0o600);
  await sleep(LEASE_MS); // the claims' lease ends meanwhile
  database.restore();
  const second = await serve({ table, spool });
  expect(second.output()).toContain('the spool holds answers');
  await expectReplayed(second.url, firsts);
});

test('kill -9 during an outage, without a spool: the answers are lost, as documented (the keys end unknown)', async () => {
  const table = uniqueTable('nospool');
  const first = await serve({ table, spool: false });
  const firsts = await answeredDuringOutage(first.url, keysOf('nospool', 3));
  await first.kill('SIGKILL');
  database.restore();
  await sleep(LEASE_MS);
  const second = await serve({ table, spool: false });
  for (const key of firsts.keys()) {
    const res = await retryPast503(second.url, key);
    expect({ key, status: res.status, outcome: res.headers['idempotency-outcome'] }).toEqual({
      key,
      status: 502,
      outcome: 'unknown',
    });
  }
});

test('SIGTERM during an outage shorter than drainTimeout: the drain stores every answer before it exits', async () => {
  const table = uniqueTable('drain');
  const proxy = await serve({ table, spool: false, outbox: ', drainTimeout: 20s' });
  const firsts = await answeredDuringOutage(proxy.url, keysOf('drain'));
  const exited = proxy.kill('SIGTERM');
  await sleep(LEASE_MS + 1_000); // a deploy while PostgreSQL is still away, longer than the lease
  database.restore();
  expect(await exited).toBe(0);
  expect(proxy.output()).not.toContain('shutdown: a pending');
  const next = await serve({ table, spool: false });
  await expectReplayed(next.url, firsts);
});

test('SIGTERM whose drain outlasts drainTimeout: with a spool the answers wait there for the next start', async () => {
  const spool = tempDir();
  const table = uniqueTable('drainspool');
  const proxy = await serve({ table, spool, outbox: ', drainTimeout: 1s' });
  const firsts = await answeredDuringOutage(proxy.url, keysOf('outlast'));
  expect(await proxy.kill('SIGTERM')).toBe(0);
  expect(proxy.output()).toContain('stay in the spool');
  database.restore();
  const next = await serve({ table, spool });
  await expectReplayed(next.url, firsts);
});

test('SIGTERM whose drain outlasts drainTimeout, without a spool: one error line per answer lost', async () => {
  const table = uniqueTable('drainlost');
  const proxy = await serve({ table, spool: false, outbox: ', drainTimeout: 1s' });
  const keys = keysOf('lost', 4);
  await answeredDuringOutage(proxy.url, keys);
  expect(await proxy.kill('SIGTERM')).toBe(0);
  const lines = proxy
    .output()
    .split('\n')
    .filter((line) => line.includes('shutdown: a pending completion could not be stored'));
  expect(lines).toHaveLength(keys.length);
});

/** An instance in this process (to read its outbox), with a spool, on a database of its own to cut. */
async function inProcess(
  name: string,
  outbox: string,
): Promise<{ proxy: TestProxy; cut: CuttableDatabase }> {
  const table = uniqueTable(name);
  const cut = await cuttableDatabase();
  const proxy = await startProxy({
    yaml: yamlFor({ table, spool: tempDir(), outbox }),
    table,
    databaseUrl: cut.url,
    env: { PROXY_PORT: '0', ADMIN_PORT: '0' },
  });
  return { proxy, cut };
}

test('past the memory bound the answers go to the spool, not away: 20 queued over a bound of 5, none lost', async () => {
  const { proxy, cut } = await inProcess('bound', ', maxWrites: 5');
  try {
    const keys = keysOf('bound', 20);
    const sent = keys.map(async (key) => [key, await order(proxy.url, key)] as const);
    await untilUpstreamHas(upstream, keys);
    cut.cut();
    const firsts = new Map<string, string>();
    for (const [key, res] of await Promise.all(sent)) {
      expect(res.status).toBe(201);
      firsts.set(key, res.text());
    }
    expect(proxy.store.pendingWrites.writes).toBe(20);
    // In memory: the bytes of at most 5 answers; the others are read back from the spool.
    expect(proxy.store.pendingWrites.bytes).toBeLessThan(6 * 2_500 + 15 * 300);
    await sleep(LEASE_MS);
    cut.restore();
    await until(() => proxy.store.pendingWrites.writes === 0, 'the queued answers to land', {
      timeoutMs: 15_000,
    });
    expect(proxy.logs.filter((line) => String(line.msg).includes('gave up'))).toEqual([]);
    await expectReplayed(proxy.url, firsts);
  } finally {
    await proxy.close();
    await cut.close();
  }
});

test('a full spool: the answer waits until PostgreSQL has it, and new claims get 503 meanwhile', async () => {
  // Room for one answer of about 2 kB, not two.
  const { proxy, cut } = await inProcess('full', ', spoolMaxBytes: 3kb');
  try {
    const keys = keysOf('full', 2);
    const answered = new Map<string, number>();
    const sent = keys.map((key) =>
      order(proxy.url, key).then((res) => answered.set(key, res.status)),
    );
    await untilUpstreamHas(upstream, keys);
    cut.cut();
    // One answer fits on disk and is sent after the hold; the other has no room: it is not sent
    // while PostgreSQL is away.
    await sleep(UPSTREAM_MS + 1_500);
    expect([...answered.values()]).toEqual([201]);
    const refused = await order(proxy.url, `another-${Date.now()}`);
    expect(refused.status).toBe(503);
    expect(refused.json()).toMatchObject({ code: 'STORE_UNAVAILABLE' });
    expect(proxy.logs.some((line) => String(line.msg).includes('the spool could not take'))).toBe(
      true,
    );
    cut.restore();
    await Promise.all(sent);
    expect([...answered.values()]).toEqual([201, 201]);
    for (const key of keys) {
      expect(upstream.runs(key)).toBe(1);
      expect((await retryPast503(proxy.url, key)).status).toBe(201);
    }
  } finally {
    await proxy.close();
    await cut.close();
  }
});

test('a torn spool file (a crash mid-append): the readable entries land, one line says what was dropped, the proxy starts', async () => {
  const spool = tempDir();
  const table = uniqueTable('torn');
  const first = await serve({ table, spool });
  const firsts = await answeredDuringOutage(first.url, keysOf('torn', 3));
  await first.kill('SIGKILL');
  // A crash in the middle of a fourth append: half a frame at the end.
  const file = path.join(spool, 'spool.log');
  const whole = fs.readFileSync(file);
  fs.appendFileSync(file, whole.subarray(0, Math.floor(whole.length / 5)));
  database.restore();
  const second = await serve({ table, spool });
  const torn = second
    .output()
    .split('\n')
    .filter((line) => line.includes('torn or damaged record'));
  expect(torn).toHaveLength(1);
  await expectReplayed(second.url, firsts);
});

test('a second proxy pointed at a spool in use refuses to start, saying why', async () => {
  const spool = tempDir();
  const table = uniqueTable('twice');
  await serve({ table, spool });
  const second = startProxyProcess({
    yaml: yamlFor({ table, spool }),
    env: { DATABASE_URL: database.url },
  });
  await expect(second).rejects.toThrow(
    /exited early \(2\)[\s\S]*store\.outbox\.spool[\s\S]*in use/,
  );
});

test('a spool other users can read is refused at start', async () => {
  const spool = tempDir();
  fs.chmodSync(spool, 0o755);
  const started = startProxyProcess({
    yaml: yamlFor({ table: uniqueTable('open'), spool }),
    env: { DATABASE_URL: database.url },
  });
  await expect(started).rejects.toThrow(
    /exited early \(2\)[\s\S]*store\.outbox\.spool[\s\S]*chmod/,
  );
});

const notRoot = process.getuid?.() !== 0 || serverUserIds() === undefined;
(notRoot ? test.skip : test)(
  'a spool owned by another user is refused at start (as root)',
  async () => {
    const spool = tempDir();
    const other = serverUserIds()!;
    fs.chownSync(spool, other.uid, other.gid);
    const started = startProxyProcess({
      yaml: yamlFor({ table: uniqueTable('owner'), spool }),
      env: { DATABASE_URL: database.url },
    });
    await expect(started).rejects.toThrow(/exited early \(2\)[\s\S]*store\.outbox\.spool/);
  },
);
if (notRoot) process.stderr.write('SKIPPED spool owned by another user: needs root\n');

test('workers each keep a spool of their own, and a worker killed -9 lands its answers when replaced', async () => {
  const spool = tempDir();
  const table = uniqueTable('workers');
  const proxy = await serve({ table, spool, workers: 2 });
  expect(fs.readdirSync(spool).sort()).toEqual(['worker-1', 'worker-2']);
  const firsts = await answeredDuringOutage(proxy.url, keysOf('workers', 6));
  // Every worker that took a request spooled its answers; kill them all, the primary replaces them.
  const held = fs
    .readdirSync(spool)
    .filter((dir) => fs.statSync(path.join(spool, dir, 'spool.log')).size > 0);
  expect(held.length).toBeGreaterThan(0);
  const pids = workerPids(proxy);
  expect(pids).toHaveLength(2);
  const listening = (): number => proxy.output().split('idempotency-proxy listening').length - 1;
  const before = listening();
  for (const pid of pids) process.kill(pid, 'SIGKILL');
  // Back before the replacements start: they need PostgreSQL to serve.
  database.restore();
  // A connection the primary accepted just as the last worker died waits for nobody (node:cluster):
  // the retries go once the replacements listen.
  await until(() => listening() >= before + 2, 'both replacements to listen', {
    timeoutMs: 20_000,
  });
  expect(proxy.output().split('the spool holds answers').length - 1).toBe(2);
  await expectReplayed(proxy.url, firsts);
});

/** The PIDs of the workers a workers proxy has logged lines from so far. */
function workerPids(proxy: ProxyProcess): number[] {
  const pids = new Set<number>();
  for (const line of proxy.output().split('\n')) {
    if (!line.startsWith('{')) continue;
    const { pid } = JSON.parse(line) as { pid?: number };
    if (pid !== undefined && pid !== proxy.child.pid) pids.add(pid);
  }
  return [...pids];
}
