// Failover (SPEC §10): a primary with a streaming standby, under a steady stream of new keys and
// retries. The primary crashes, the standby is promoted and the database URL's host (a TCP forwarder
// here) switches to it. The proxy answers 503 meanwhile and recovers without a restart. With a
// synchronous standby no committed claim is lost, so no key runs twice; with asynchronous
// replication the claims the standby had not received are lost, and their keys run again: the test
// measures how many and prints the figures.
import { quoteTableName } from '../../src/db/identifier';
import { PgNode, pgClusterUnavailable } from '../support/pg-cluster';
import { executionCounts, startKeyTraffic } from '../support/key-traffic';
import { startProxy } from '../support/proxy';
import { startTcpForwarder } from '../support/tcp-forwarder';
import { startUpstream } from '../support/upstream';

const unavailable = pgClusterUnavailable();
const describeIfCluster = unavailable ? describe.skip : describe;
if (unavailable) {
  console.warn(`SKIPPED: failover tests did not run: ${unavailable}`);
  test(`SKIPPED: ${unavailable}, so no failover ran`, () => undefined);
}

interface Figures {
  readonly replication: string;
  readonly requests: number;
  readonly keys: number;
  readonly executions: number;
  readonly duplicates: number;
  /** Keys executed before the crash whose claim the promoted standby does not have. */
  readonly lostClaims: number;
  /** From the crash to the first new key executed through the promoted standby. */
  readonly outageMs: number;
  /** From the switch of the URL's host to that first execution. */
  readonly recoveryAfterSwitchMs: number;
  readonly answered503: number;
}

async function failover(
  synchronous: boolean,
): Promise<Figures & { duplicateKeys: string[]; lostKeys: Set<string> }> {
  const replication = synchronous ? 'synchronous' : 'asynchronous';
  const cleanup: (() => Promise<void>)[] = [];
  try {
    const primary = await PgNode.init('primary');
    cleanup.push(() => primary.dispose());
    await primary.start();
    const standby = await PgNode.standbyOf(primary, 'standby1');
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
      prefix: replication,
      workers: 6,
    });
    cleanup.push(() => traffic.stop());
    await traffic.until('40 keys executed', () => traffic.executedAnswers() >= 40);

    const crashedAt = Date.now();
    await primary.stop('immediate');
    await traffic.until('a 503', () =>
      traffic.answers.some((a) => a.at > crashedAt && a.status === 503),
    );
    // What the standby has when it takes over: every claim committed on it.
    const onStandby = new Set(
      (await standby.query<{ key: string }>(`SELECT key FROM ${quoteTableName(proxy.table)}`)).map(
        (r) => r.key,
      ),
    );
    await standby.promote();
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

    const { duplicates } = executionCounts(
      upstream.executions().map((r) => String(r.headers['idempotency-key'])),
    );
    const lostKeys = new Set(
      [...executedAt]
        .filter(([key, times]) => times[0]! < crashedAt && !onStandby.has(key))
        .map(([key]) => key),
    );
    const answered503 = traffic.answers.filter((a) => a.status === 503).length;
    // Protected routes failed closed: a 503 only while the database was away.
    expect(traffic.answers.filter((a) => a.status === 503 && a.at < crashedAt)).toHaveLength(0);
    return {
      replication,
      requests: traffic.answers.length,
      keys: traffic.keys.size,
      executions: upstream.executions().length,
      duplicates: duplicates.length,
      duplicateKeys: duplicates,
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
  console.log(`failover figures (${figures.replication} replication): ${JSON.stringify(figures)}`);
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
    // Not asserted to be zero: that is what asynchronous replication can lose. Every duplicate is
    // explained by a claim the standby never received.
    for (const key of duplicateKeys) expect(lostKeys).toContain(key);
  }, 120_000);
});
