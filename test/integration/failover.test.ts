// Failover (docs/store-topologies.md): a primary with a streaming standby, under a steady stream of new
// keys and retries. The primary crashes, the standby is promoted and the database URL's host (a TCP
// forwarder here) switches to it. The proxy answers 503 meanwhile and recovers without a restart.
// With a synchronous standby no committed claim is lost, so no key runs twice; with asynchronous
// replication the claims the standby had not received are lost, and their keys run again: the test
// measures how many and prints the figures.
import { quoteTableName } from '../../src/db/identifier';
import { PgNode, pgClusterUnavailable } from '../support/pg-cluster';
import { executionCounts, type KeyTraffic, startKeyTraffic } from '../support/key-traffic';
import { startProxy, type TestProxy } from '../support/proxy';
import { startTcpForwarder, type TcpForwarder } from '../support/tcp-forwarder';
import { startUpstream } from '../support/upstream';
import { describeUnless, recordFigures } from '../support/run-report';

const unavailable = pgClusterUnavailable();
const describeIfCluster = describeUnless(unavailable, 'failover.test.ts: no failover ran');

/** The standby lags for this long, or until this many keys executed, before the primary crashes. */
const LAG_MS = 1_000;
const LAG_KEYS = 20;

interface Figures {
  readonly replication: string;
  readonly requests: number;
  readonly keys: number;
  readonly executions: number;
  readonly duplicates: number;
  /** Keys executed on a claim of the old primary that the promoted standby does not have. */
  readonly lostClaims: number;
  /** How long the standby lagged before the crash, and how many keys executed meanwhile. */
  readonly lagMs: number;
  readonly executedWhileLagging: number;
  /** From the crash to the first new key executed through the promoted standby. */
  readonly outageMs: number;
  /** From the switch of the URL's host to that first execution. */
  readonly recoveryAfterSwitchMs: number;
  /** How long pg_promote took (part of the outage). */
  readonly promoteMs: number;
  readonly answered503: number;
}

interface Cluster {
  readonly primary: PgNode;
  readonly standby: PgNode;
  /** The standby's replication connection: it can be held (lag) and dropped. */
  readonly replicationLink: TcpForwarder;
  /** The database URL's host: the proxy reaches PostgreSQL through it. */
  readonly forwarder: TcpForwarder;
  readonly proxy: TestProxy;
  readonly traffic: KeyTraffic;
  /** When each key reached the upstream (one entry per execution). */
  readonly executedAt: Map<string, number[]>;
  executedKeys(): string[];
}

/**
 * A primary with a streaming standby, the proxy on it through a switchable host, and a stream of
 * keys running. Whatever it started is stopped by the steps it pushes onto `cleanup`.
 */
async function startCluster(
  name: string,
  synchronous: boolean,
  cleanup: (() => Promise<void>)[],
): Promise<Cluster> {
  const primary = await PgNode.init('primary');
  cleanup.push(() => primary.dispose());
  await primary.start();
  // The standby replicates through a link the test can hold, as a standby that lags behind does.
  const replicationLink = await startTcpForwarder(primary);
  cleanup.push(() => replicationLink.close());
  const standby = await PgNode.standbyOf(primary, 'standby1', {
    via: { host: '127.0.0.1', port: replicationLink.port },
  });
  cleanup.push(() => standby.dispose());
  await standby.start();
  await primary.untilStreaming('standby1');
  if (synchronous) await primary.requireSynchronousStandby('standby1');

  const forwarder = await startTcpForwarder(primary);
  cleanup.push(() => forwarder.close());
  const executedAt = new Map<string, number[]>();
  const upstream = await startUpstream((req, res) => {
    const key = String(req.headers['idempotency-key']);
    executedAt.set(key, [...(executedAt.get(key) ?? []), Date.now()]);
    res.writeHead(201, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ key, execution: upstream.executions().length }));
  });
  cleanup.push(() => upstream.close());
  const proxy = await startProxy({
    databaseUrl: forwarder.url,
    yaml: `
store: { table: "\${TEST_TABLE}" }
upstreams: { api: { url: ${upstream.url} } }
defaults: { lockTimeout: 2s }
routes:
  - { name: orders, match: { method: POST, path: /orders }, upstream: api, idempotency: {} }
`,
  });
  cleanup.push(() => proxy.close());

  const traffic = startKeyTraffic({
    url: `${proxy.url}/orders`,
    prefix: name,
    workers: 6,
  });
  cleanup.push(() => traffic.stop());
  await traffic.until('40 keys executed', () => traffic.executedAnswers() >= 40);
  return {
    primary,
    standby,
    replicationLink,
    forwarder,
    proxy,
    traffic,
    executedAt,
    executedKeys: () => upstream.executions().map((r) => String(r.headers['idempotency-key'])),
  };
}

async function failover(
  synchronous: boolean,
): Promise<Figures & { duplicateKeys: string[]; lostKeys: Set<string> }> {
  const replication = synchronous ? 'synchronous' : 'asynchronous';
  const cleanup: (() => Promise<void>)[] = [];
  try {
    const cluster = await startCluster(replication, synchronous, cleanup);
    const { primary, standby, replicationLink, forwarder } = cluster;
    const { proxy, traffic, executedAt, executedKeys } = cluster;
    // The standby falls behind for a moment before the crash: asynchronous commits go on without it
    // (and are lost with the primary), synchronous ones wait for it (and fail with the primary).
    replicationLink.hold();
    const heldAt = Date.now();
    const executedAtHold = traffic.executedAnswers();
    await traffic.until(
      `${LAG_KEYS} keys executed while the standby lags, or ${LAG_MS} ms`,
      () => traffic.executedAnswers() >= executedAtHold + LAG_KEYS || Date.now() - heldAt > LAG_MS,
    );
    const executedWhileLagging = traffic.executedAnswers() - executedAtHold;
    const crashedAt = Date.now();
    await primary.stop('immediate');
    replicationLink.drop(); // what the link still held never reaches the standby
    await traffic.until('a 503', () =>
      traffic.answers.some((a) => a.at > crashedAt && a.status === 503),
    );
    const promotingAt = Date.now();
    await standby.promote();
    const promoteMs = Date.now() - promotingAt;
    // What the promoted standby has before any new traffic reaches it: every claim it received.
    const onStandby = new Set(
      (await standby.query<{ key: string }>(`SELECT key FROM ${quoteTableName(proxy.table)}`)).map(
        (r) => r.key,
      ),
    );
    forwarder.switchTo(standby);
    const switchedAt = Date.now();
    const isRecovered = (): boolean =>
      traffic.answers.some((a) => a.at > switchedAt && a.status === 201 && !a.replayed);
    await traffic.until('a new key executed through the promoted standby', isRecovered);
    const recoveredAt = traffic.answers.find(
      (a) => a.at > switchedAt && a.status === 201 && !a.replayed,
    )!.at;
    const executedBefore = traffic.executedAnswers();
    await traffic.until(
      '40 more keys executed',
      () => traffic.executedAnswers() >= executedBefore + 40,
    );
    await traffic.stop();
    await traffic.settle();

    const { duplicates } = executionCounts(executedKeys());
    const lostKeys = new Set(
      [...executedAt]
        // Executed on a claim of the old primary (before the switch), and gone with it.
        .filter(([key, times]) => times[0]! < switchedAt && !onStandby.has(key))
        .map(([key]) => key),
    );
    const answered503 = traffic.answers.filter((a) => a.status === 503).length;
    // Protected routes failed closed: a 503 only while the database was away.
    expect(traffic.answers.filter((a) => a.status === 503 && a.at < crashedAt)).toHaveLength(0);
    return {
      replication,
      requests: traffic.answers.length,
      keys: traffic.keys.size,
      executions: executedKeys().length,
      duplicates: duplicates.length,
      duplicateKeys: duplicates,
      lagMs: crashedAt - heldAt,
      promoteMs,
      executedWhileLagging,
      lostClaims: lostKeys.size,
      lostKeys,
      outageMs: recoveredAt - crashedAt,
      recoveryAfterSwitchMs: recoveredAt - switchedAt,
      answered503,
    };
  } finally {
    for (const step of cleanup.reverse()) await step().catch(() => undefined);
  }
}

function report(figures: Figures): void {
  recordFigures(__filename, `${figures.replication} replication`, figures);
}

/**
 * The old primary turns read-only (as a demoted primary does) while the URL's host moves to the
 * promoted standby: claims on connections to the old one fail with SQLSTATE 25006 and answer 503,
 * each such connection is dropped, and new ones reach the new primary.
 */
async function readOnlyPrimary(): Promise<{
  duplicates: string[];
  readOnlyLog: boolean;
  answered503: number;
  outageMs: number;
}> {
  const cleanup: (() => Promise<void>)[] = [];
  try {
    const { primary, standby, forwarder, proxy, traffic, executedKeys } = await startCluster(
      'read-only',
      false,
      cleanup,
    );
    await primary.query('ALTER SYSTEM SET default_transaction_read_only = on');
    await primary.query('SELECT pg_reload_conf()');
    const readOnlyAt = Date.now();
    await traffic.until('a 503 from the read-only primary', () =>
      traffic.answers.some((a) => a.at > readOnlyAt && a.status === 503),
    );
    // Nothing is written any more: once the standby has replayed all the primary wrote, promote it.
    const [written] = await primary.query<{ lsn: string }>(
      'SELECT pg_current_wal_lsn()::text AS lsn',
    );
    await standby.until('replay of everything the primary wrote', async () => {
      const [row] = await standby.query<{ done: boolean }>(
        'SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn AS done',
        [written!.lsn],
      );
      return row?.done === true;
    });
    await standby.promote();
    forwarder.switchTo(standby);
    const switchedAt = Date.now();
    await traffic.until('a new key executed through the promoted standby', () =>
      traffic.answers.some((a) => a.at > switchedAt && a.status === 201 && !a.replayed),
    );
    const recoveredAt = traffic.answers.find(
      (a) => a.at > switchedAt && a.status === 201 && !a.replayed,
    )!.at;
    await traffic.stop();
    await traffic.settle();
    return {
      duplicates: executionCounts(executedKeys()).duplicates,
      readOnlyLog: proxy.logs.some((line) => line.code === '25006'),
      answered503: traffic.answers.filter((a) => a.status === 503).length,
      outageMs: recoveredAt - readOnlyAt,
    };
  } finally {
    for (const step of cleanup.reverse()) await step().catch(() => undefined);
  }
}

describeIfCluster('failover to a promoted standby', () => {
  test('synchronous standby: 503 while the primary is gone, recovery without a restart, no key runs twice', async () => {
    const { duplicateKeys, lostKeys, ...figures } = await failover(true);
    report(figures);
    expect(figures.answered503).toBeGreaterThan(0);
    expect(lostKeys.size).toBe(0); // no committed claim was lost
    expect(duplicateKeys).toEqual([]);
    expect(figures.executions).toBeLessThanOrEqual(figures.keys);
  }, 120_000);

  test('asynchronous standby: recovery without a restart; a key runs twice only if the standby lost its claim', async () => {
    const { duplicateKeys, lostKeys, ...figures } = await failover(false);
    report(figures);
    expect(figures.answered503).toBeGreaterThan(0);
    // What asynchronous replication loses: the claims committed while the standby lagged. Each of
    // those keys ran again when it was retried after the failover, and no other key did.
    expect(figures.executedWhileLagging).toBeGreaterThan(0);
    expect(lostKeys.size).toBeGreaterThan(0);
    expect(new Set(duplicateKeys)).toEqual(lostKeys);
  }, 120_000);

  test('an old primary that turns read-only: 503 (SQLSTATE 25006) until the host reaches the new primary, then recovery', async () => {
    const figures = await readOnlyPrimary();
    recordFigures(__filename, 'read-only old primary', {
      ...figures,
      duplicates: figures.duplicates.length,
    });
    expect(figures.readOnlyLog).toBe(true);
    expect(figures.answered503).toBeGreaterThan(0);
    expect(figures.duplicates).toEqual([]);
  }, 120_000);
});
