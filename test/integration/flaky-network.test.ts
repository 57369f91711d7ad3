// A flaky network between the proxy and PostgreSQL: the proxy process and the database each run in
// a network namespace of the test's own, joined by a veth pair, with packet loss (and delay, where
// the kernel has tc netem) all along, and a timed partition that starts while a request is between
// its claim and its completion. No key executes twice, protected routes fail closed during the
// partition (nothing is forwarded without a claim), and the proxy recovers after it without a
// restart. Only addresses inside the two namespaces, loopback and Unix sockets are used: the test
// reaches the proxy, and the proxy the test's upstream, through netns-bridge.js.
import { type ChildProcess, spawn } from 'node:child_process';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { executionCounts, startKeyTraffic } from '../support/key-traffic';
import {
  createNetnsPair,
  netemAvailable,
  netnsUnavailable,
  type NetnsPair,
} from '../support/netns';
import { PgNode, pgClusterUnavailable } from '../support/pg-cluster';
import { PROXY_BIN } from '../support/proxy-process';
import { type Bridge, startBridge } from '../support/tcp-forwarder';
import { sleep, startUpstream, type TestUpstream } from '../support/upstream';
import { describeUnless, recordFigures } from '../support/run-report';

/** The namespaces this file made, to check that none outlives it. */
const made: string[] = [];

const unavailable = netnsUnavailable() ?? pgClusterUnavailable();
const describeIfNetns = describeUnless(
  unavailable,
  'flaky-network.test.ts: no flaky network was tested',
);
const netem = unavailable ? false : netemAvailable();
if (!unavailable) {
  // Kept with the figures: the delay is real either way, but not always the kernel's.
  recordFigures(
    __filename,
    'delay source',
    netem
      ? 'tc netem on the veth link'
      : 'no sch_netem in this kernel: a relay inside the proxy namespace (netns-bridge.js) adds the 10 ± 5 ms; loss and the partition (nftables) are on the veth link as always',
  );
}
/** Latency each way between proxy and PostgreSQL (netem, or the relay on kernels without it). */
const DELAY = { delayMs: 10, jitterMs: 5 };

/** How long the partition lasts: longer than the pool's 2 s connect timeout, so requests fail over it. */
const PARTITION_MS = 5_000;
const LOSS_PERCENT = 3;

/** Spawns `command` inside `netns` and resolves once its output contains `ready`. */
async function spawnInNetns(
  netns: string,
  command: string[],
  ready: string,
  env: NodeJS.ProcessEnv = process.env,
): Promise<{ child: ChildProcess; output(): string }> {
  const child = spawn('ip', ['netns', 'exec', netns, ...command], {
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  await new Promise<void>((resolve, reject) => {
    const onData = (data: Buffer): void => {
      output += data.toString();
      if (output.includes(ready)) resolve();
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.once('exit', (code) =>
      reject(new Error(`${command.join(' ')} exited (${code}):\n${output}`)),
    );
  });
  return { child, output: () => output };
}

async function stopChild(child: ChildProcess | undefined): Promise<void> {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGKILL');
  await exited;
}

describeIfNetns('a flaky network between the proxy and PostgreSQL', () => {
  let pair: NetnsPair;
  let db: PgNode;
  let upstream: TestUpstream;
  const children: ChildProcess[] = [];
  const bridges: Bridge[] = [];
  let dir: string;
  let proxyUrl: string;
  let partitionedAt = 0;
  let healedAt = 0;
  let partitionAt: number | undefined;
  /** Upstream executions: key and when it arrived. */
  const executions: { key: string; at: number }[] = [];

  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ip-flaky-'));
    pair = createNetnsPair();
    made.push(pair.a.netns, pair.b.netns);
    const proxyHost = pair.a;
    const dbHost = pair.b;
    pair.loss(LOSS_PERCENT);
    if (netem) pair.delay(DELAY.delayMs, DELAY.jitterMs);

    db = await PgNode.init('flaky', { host: dbHost.address, port: 5432, netns: dbHost.netns });
    await db.start();

    upstream = await startUpstream((req, res) => {
      const key = String(req.headers['idempotency-key']);
      executions.push({ key, at: Date.now() });
      // The partition starts while this request is between its claim and its completion.
      if (partitionAt !== undefined && executions.length === partitionAt) {
        pair.partition(true);
        partitionedAt = Date.now();
      }
      res.writeHead(201, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ key, execution: executions.length }));
    });
    const upSocket = path.join(dir, 'upstream.sock');
    const proxySocket = path.join(dir, 'proxy.sock');
    bridges.push(await startBridge(`unix:${upSocket}`, `tcp:127.0.0.1:${upstream.port}`));
    const inside = await spawnInNetns(
      proxyHost.netns,
      [
        process.execPath,
        path.join(__dirname, '../support/netns-bridge.js'),
        `tcp:127.0.0.1:4000=unix:${upSocket}`,
        `unix:${proxySocket}=tcp:127.0.0.1:8080`,
      ],
      'ready',
    );
    children.push(inside.child);

    const config = path.join(dir, 'proxy.yaml');
    fs.writeFileSync(
      config,
      `
listen: { host: 127.0.0.1, port: 8080 }
admin: { host: 127.0.0.1, port: 9090 }
store: { table: flaky_keys }
upstreams: { api: { url: "http://127.0.0.1:4000" } }
defaults: { lockTimeout: 3s }
routes:
  - { name: orders, match: { method: POST, path: /orders }, upstream: api, idempotency: {} }
`,
    );
    // Without netem the proxy reaches PostgreSQL through a delaying relay in its own namespace; the
    // relay's side of the link still crosses the veth pair, with its loss and partition.
    let databaseUrl = db.url;
    if (!netem) {
      const relay = await spawnInNetns(
        proxyHost.netns,
        [
          process.execPath,
          path.join(__dirname, '../support/netns-bridge.js'),
          `tcp:127.0.0.1:5433=tcp:${dbHost.address}:5432=${DELAY.delayMs}:${DELAY.jitterMs}`,
        ],
        'ready',
      );
      children.push(relay.child);
      const url = new URL(db.url);
      url.hostname = '127.0.0.1';
      url.port = '5433';
      databaseUrl = url.toString();
    }
    const proxy = await spawnInNetns(
      proxyHost.netns,
      [process.execPath, PROXY_BIN, 'serve', '--config', config],
      'admin listening',
      { ...process.env, DATABASE_URL: databaseUrl, LOG_LEVEL: 'info' },
    );
    children.push(proxy.child);
    const entry = await startBridge('tcp:127.0.0.1:0', `unix:${proxySocket}`);
    bridges.push(entry);
    proxyUrl = `http://127.0.0.1:${entry.port}`;
  }, 120_000);

  afterAll(async () => {
    for (const child of children.reverse()) await stopChild(child);
    for (const bridge of bridges) await bridge.close();
    await upstream?.close();
    await db?.dispose();
    pair?.dispose();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  test('loss and a partition mid-request: no key runs twice, 503 while partitioned, recovery after', async () => {
    const traffic = startKeyTraffic({
      url: `${proxyUrl}/orders`,
      prefix: 'flaky',
      // More workers than the proxy's pool has connections: during the partition some wait for one.
      workers: 12,
      requestTimeoutMs: 20_000,
    });
    try {
      await traffic.until('30 keys executed over the lossy link', () => executions.length >= 30);
      partitionAt = executions.length + 5;
      await traffic.until('the partition', () => partitionedAt > 0);
      // A timed partition: it lasts PARTITION_MS, and at least until a request failed closed on it.
      await sleep(PARTITION_MS);
      await traffic.until('a 503 during the partition', () =>
        traffic.answers.some((a) => a.at > partitionedAt && a.status === 503),
      );
      pair.partition(false);
      healedAt = Date.now();
      await traffic.until(
        'a new key executed after the partition',
        () => executions.some((e) => e.at > healedAt),
        60_000,
      );
      const after = executions.length;
      await traffic.until('30 more keys executed', () => executions.length >= after + 30, 60_000);
    } finally {
      pair.partition(false);
      await traffic.stop();
    }
    pair.loss(0);
    await traffic.settle(60_000);

    const { duplicates } = executionCounts(executions.map((e) => e.key));
    // Fail closed: no claim can commit across the partition, so nothing new reached the upstream
    // during it (a request whose claim committed just before it started may still arrive).
    const duringPartition = executions.filter(
      (e) => e.at > partitionedAt + 1_000 && e.at < healedAt,
    );
    const figures = {
      delay: `${DELAY.delayMs} ± ${DELAY.jitterMs} ms each way (${netem ? 'tc netem' : 'relay'})`,
      lossPercent: LOSS_PERCENT,
      partitionMs: healedAt - partitionedAt,
      requests: traffic.answers.length,
      keys: traffic.keys.size,
      executions: executions.length,
      duplicates: duplicates.length,
      answered503: traffic.answers.filter((a) => a.status === 503).length,
      answered503DuringPartition: traffic.answers.filter(
        (a) => a.status === 503 && a.at > partitionedAt && a.at <= healedAt + 1_000,
      ).length,
      failedRequests: traffic.answers.filter((a) => a.status === 0).length,
      unknownOutcomes: traffic.answers.filter((a) => a.status === 502).length,
      recoveryAfterHealMs: executions.find((e) => e.at > healedAt)!.at - healedAt,
    };
    recordFigures(__filename, 'partition and loss', figures);
    expect(duplicates).toEqual([]);
    expect(duringPartition).toEqual([]);
    expect(figures.answered503DuringPartition).toBeGreaterThan(0);
    expect(executions.length).toBeLessThanOrEqual(traffic.keys.size);
    // Every execution had a claim: its record is in the table.
    const rows = await db.query<{ key: string }>('SELECT key FROM flaky_keys');
    const recorded = new Set(rows.map((r) => r.key));
    expect(executions.filter((e) => !recorded.has(e.key))).toEqual([]);
  }, 180_000);
});

// This file's namespaces are gone again (also checked by name, in case a dispose failed). Only its
// own: another run of the suite on this machine may have namespaces of its own up right now.
afterAll(() => {
  if (unavailable) return;
  const left = execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' })
    .split('\n')
    .map((line) => line.split(' ')[0]);
  expect(made.filter((netns) => left.includes(netns))).toEqual([]);
});
