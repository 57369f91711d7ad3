// Behind a real PgBouncer (Debian's 1.18) in front of the suite's PostgreSQL (docs/store-topologies.md). In
// transaction mode a named prepared statement does not survive between transactions, an advisory
// lock must not outlive its transaction and LISTEN is never delivered: claims, completions, waits,
// migrations and pruning still work, wait mode polls and says so. Session mode keeps LISTEN.
import { Pool } from 'pg';
import { PostgresKeyStore } from '../../src/store/postgres/key-store';
import { completionChannel } from '../../src/store/postgres/statements';
import { LATEST_VERSION, migrate } from '../../src/db/migrate';
import { createPool } from '../../src/db/pool';
import { pruneExpired } from '../../src/store/postgres/pruner';
import { quoteTableName } from '../../src/db/identifier';
import { postJson } from '../support/http';
import { PGBOUNCER_BIN, type PgBouncer, startPgBouncer } from '../support/pgbouncer';
import { databaseUrl, startProxy, type TestProxy, uniqueTable } from '../support/proxy';
import { sleep, startUpstream, type TestUpstream } from '../support/upstream';
import { describeUnless } from '../support/run-report';

const describeIfPgBouncer = describeUnless(
  !PGBOUNCER_BIN && 'pgbouncer is not installed (apt-get install pgbouncer; .ci/run does as root)',
  'pgbouncer.test.ts: nothing ran against PgBouncer',
);

describeIfPgBouncer('behind PgBouncer', () => {
  let bouncer: PgBouncer;
  let upstream: TestUpstream;
  const direct = createPool({ url: databaseUrl(), size: 2, onError: () => undefined });
  const proxies: TestProxy[] = [];
  const pools: Pool[] = [];

  const yaml = (onConcurrent: 'reject' | 'wait'): string => `
store: { table: "\${TEST_TABLE}" }
upstreams: { api: { url: ${upstream.url} } }
defaults: { onConcurrent: ${onConcurrent}, waitTimeout: 10s }
routes:
  - { name: orders, match: { method: POST, path: /orders }, upstream: api, idempotency: {} }
`;

  beforeAll(async () => {
    bouncer = await startPgBouncer({ serverUrl: databaseUrl(), poolSize: 2 });
    // The first request of each key is slow, so repeats arrive while it is in flight.
    upstream = await startUpstream(async (req, res) => {
      if (req.url.includes('slow')) await sleep(req.url.includes('slower') ? 1_500 : 600);
      res.writeHead(201, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({ key: req.headers['idempotency-key'], n: upstream.executions().length }),
      );
    });
  }, 60_000);

  afterAll(async () => {
    for (const proxy of proxies) await proxy.close();
    for (const pool of pools) await pool.end();
    await direct.end();
    await upstream?.close();
    await bouncer?.close();
  });

  const bouncedPool = (url: string, size = 8): Pool => {
    const pool = createPool({ url, size, onError: () => undefined });
    pools.push(pool);
    return pool;
  };

  test('transaction mode: named statements that do not survive are sent again unnamed, and every call answers', async () => {
    const table = uniqueTable('bounce');
    const pool = bouncedPool(bouncer.transactionUrl);
    await migrate(pool, table);
    const lost: Error[] = [];
    const store = new PostgresKeyStore(pool, table, {
      onNamedStatementsLost: (error) => lost.push(error),
    });
    const id = (key: string) => ({ scope: 'orders', tenant: '', key });
    const fingerprint = Buffer.from('f');
    const claims = await Promise.all(
      Array.from({ length: 12 }, (_, n) =>
        store.claim({
          id: id(`k-${n}`),
          route: 'orders',
          fingerprint,
          leaseMs: 60_000,
          claimExpiryMs: 120_000,
        }),
      ),
    );
    expect(claims.every((claim) => claim.kind === 'claimed')).toBe(true);
    // Eight client connections, two server connections: the same statement name is parsed by more
    // sessions than there are server connections, so some Parse meets one that is already there.
    const peeks = await Promise.all(
      Array.from({ length: 24 }, (_, n) => store.peek(id(`k-${n % 12}`), fingerprint)),
    );
    expect(peeks.every((peek) => peek.kind === 'in-flight')).toBe(true);
    expect(store.namedStatements).toBe(false);
    expect(lost).toHaveLength(1);
    expect(['26000', '42P05']).toContain((lost[0] as { code?: string }).code);
    const { rows } = await direct.query(
      `SELECT count(*)::int AS n FROM ${quoteTableName(table)} WHERE state = 'in_progress'`,
    );
    expect(rows[0].n).toBe(12);
  });

  test('transaction mode: every store statement works on whichever server connection it gets', async () => {
    const table = uniqueTable('bounce');
    const pool = bouncedPool(bouncer.transactionUrl);
    await migrate(pool, table);
    // Unnamed from the start (as after the first lost statement), with batches of several sizes.
    const store = new PostgresKeyStore(pool, table, { namedStatements: false, lanes: 4 });
    const id = (key: string) => ({ scope: 'orders', tenant: '', key });
    const fingerprint = Buffer.from('f');
    const claim = (key: string, leaseMs = 60_000) =>
      store.claim({ id: id(key), route: 'orders', fingerprint, leaseMs, claimExpiryMs: 120_000 });
    const fence = async (key: string, leaseMs?: number): Promise<string> => {
      const result = await claim(key, leaseMs);
      if (result.kind !== 'claimed') throw new Error(`${key}: ${result.kind}`);
      return result.fence;
    };
    const keys = Array.from({ length: 20 }, (_, n) => `s-${n}`);
    const fences = await Promise.all(keys.map((key) => fence(key)));
    const response = (n: number) => ({
      status: 200 + n,
      headers: [['x-n', String(n)]] as [string, string][],
      body: Buffer.from(`body-${n}`),
      bodyOmitted: false,
      outcomeUnknown: false,
    });
    expect(
      await Promise.all(
        keys.map(
          async (key, n) =>
            (await store.complete(id(key), fences[n]!, response(n), 60_000)).landing,
        ),
      ),
    ).toEqual(keys.map(() => 'stored'));
    const replay = await claim('s-7');
    expect(replay).toMatchObject({ kind: 'completed', response: { status: 207 } });
    await store.flushCounters([{ id: id('s-7'), attempts: 2, replays: 2 }]);

    expect(await store.release(id('gone'), await fence('gone'))).toBe('stored');
    expect(await store.peek(id('gone'), fingerprint)).toEqual({ kind: 'absent' });

    const stale = await fence('stale', 1);
    await sleep(20);
    const taken = await store.takeOver(id('stale'), stale, 60_000, 120_000);
    expect(taken).not.toBeNull();
    expect((await store.complete(id('stale'), stale, response(1), 60_000)).landing).toBe('stale');

    const unknown = await fence('unknown', 1);
    await sleep(20);
    const settled = await store.settleUnknown(id('unknown'), unknown, response(2), 60_000);
    expect(settled).toMatchObject({ status: 202, outcomeUnknown: true });

    const { rows } = await direct.query<{ key: string; attempts: number; replays: number }>(
      `SELECT key, attempts, replays FROM ${quoteTableName(table)} WHERE key = 's-7'`,
    );
    expect(rows).toEqual([{ key: 's-7', attempts: 4, replays: 3 }]);
  });

  test('transaction mode: the proxy executes each key once and replays the rest; wait mode polls, with a log line', async () => {
    const proxy = await startProxy({ yaml: yaml('wait'), databaseUrl: bouncer.transactionUrl });
    proxies.push(proxy);
    // The proxy serves at once; the probe gives up after 2 s, and then the listener says so.
    for (let i = 0; i < 200 && !proxy.listener.stats.polling; i++) await sleep(20);
    expect(proxy.listener.stats.polling).toBe(true);
    expect(proxy.listener.stats.connected).toBe(false);
    expect(proxy.logs.some((line) => String(line.msg).includes('LISTEN is not delivered'))).toBe(
      true,
    );

    const before = upstream.executions().length;
    const keys = Array.from({ length: 20 }, (_, n) => `tx-${n}`);
    // Every key three times at once, plus a slow one that waiters block on.
    const answers = await Promise.all([
      ...keys.flatMap((key) => [0, 1, 2].map(() => postJson(`${proxy.url}/orders`, key, { key }))),
      ...[0, 1, 2].map(() => postJson(`${proxy.url}/orders?slow`, 'tx-slow', { key: 'tx-slow' })),
    ]);
    const byKey = new Map<string, Set<string>>();
    for (const answer of answers) {
      expect(answer.status).toBe(201); // waiters, woken by polling, replay: no 409, no 503
      const body = answer.json() as { key: string };
      byKey.set(body.key, (byKey.get(body.key) ?? new Set()).add(answer.text()));
    }
    expect(upstream.executions().length - before).toBe(keys.length + 1);
    for (const bodies of byKey.values()) expect(bodies.size).toBe(1);
    expect(answers.filter((a) => a.headers['idempotent-replayed'] === 'true')).toHaveLength(
      2 * (keys.length + 1),
    );
  });

  test('transaction mode: migrations and pruning leave no advisory lock behind', async () => {
    const table = uniqueTable('bounce');
    const pools3 = [0, 1, 2].map(() => bouncedPool(bouncer.transactionUrl, 3));
    const results = await Promise.all(pools3.map((pool) => migrate(pool, table)));
    // Each migration ran exactly once, whichever of the three pools won its lock.
    const every = Array.from({ length: LATEST_VERSION }, (_, i) => i + 1);
    expect(results.flatMap((r) => r.applied).sort((a, b) => a - b)).toEqual(every);
    const t = quoteTableName(table);
    await direct.query(
      `INSERT INTO ${t} (scope, key, route, fingerprint, state, claim_token, expires_at, prune_after)
       SELECT 'orders', 'old-' || i, 'orders', '\\x00', 'completed', gen_random_uuid(),
              now() - interval '1 minute', now() - interval '1 minute'
       FROM generate_series(1, 250) AS i`,
    );
    const pruned = await Promise.all(
      pools3.map((pool) => pruneExpired(pool, table, { batchSize: 40, pauseMs: 2 })),
    );
    expect(pruned.reduce((sum, r) => sum + r.deleted, 0)).toBe(250);
    // No server connection behind PgBouncer still holds either lock: a session takes both at once.
    const { rows } = await direct.query<{ migrate: boolean; prune: boolean }>(
      `SELECT pg_try_advisory_xact_lock(hashtext($1::text)) AS migrate,
              pg_try_advisory_xact_lock(hashtext($2::text)) AS prune`,
      [`idempotency-proxy:migrate:${table}`, `idempotency-proxy:prune:${table}`],
    );
    expect(rows).toEqual([{ migrate: true, prune: true }]);
  });

  test('session mode keeps LISTEN: NOTIFY reaches the listener, and waiters replay', async () => {
    const proxy = await startProxy({ yaml: yaml('wait'), databaseUrl: bouncer.sessionUrl });
    proxies.push(proxy);
    expect(proxy.listener.stats.connected).toBe(true);
    expect(proxy.listener.stats.polling).toBe(false);
    const notifications = proxy.listener.stats.notifications;
    const executions = upstream.executions().length;
    const first = postJson(`${proxy.url}/orders?slower`, 'sess-slow', { k: 1 });
    // The repeats arrive while the first is at the upstream, so its completion NOTIFYs them.
    while (upstream.executions().length === executions) await sleep(10);
    const repeats = await Promise.all(
      [0, 1].map(() => postJson(`${proxy.url}/orders?slower`, 'sess-slow', { k: 1 })),
    );
    const answers = [await first, ...repeats];
    expect(answers.map((a) => a.status)).toEqual([201, 201, 201]);
    expect(new Set(answers.map((a) => a.text())).size).toBe(1);
    // A NOTIFY from another session (as another instance's completion sends) reaches the listener.
    await direct.query('SELECT pg_notify($1::text, $2::text)', [
      completionChannel(proxy.table),
      'from-another-instance',
    ]);
    for (let i = 0; i < 100 && proxy.listener.stats.notifications === notifications; i++)
      await sleep(20);
    expect(proxy.listener.stats.notifications).toBeGreaterThan(notifications);
  });
});
