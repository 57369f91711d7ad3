// The store on a Citus cluster (docs/store-topologies.md): CITUS_URL names a coordinator with at least two
// workers. migrate distributes the keys table by `key`; every statement the proxy runs (claims,
// completions, takeover, settle, peek, replay counters, prune, admin reads and deletes, NOTIFY)
// works on it, through a real proxy and a real upstream; and claims for different keys land on
// different workers. Without CITUS_URL nothing here runs, and the run says so.
import { randomBytes, randomUUID } from 'node:crypto';
import { Client, Pool } from 'pg';
import { createPool } from '../../src/db/pool';
import { PostgresKeyStore } from '../../src/store/postgres/key-store';
import {
  buildStatements,
  claimStatement,
  completeStatement,
  completionChannel,
} from '../../src/store/postgres/statements';
import { ShardMap } from '../../src/db/shard-map';
import { LATEST_VERSION, migrate, SHARDS_PER_NODE } from '../../src/db/migrate';
import { pruneExpired } from '../../src/store/postgres/pruner';
import {
  deleteRecord,
  findRecord,
  findRecordsByKey,
} from '../../src/store/postgres/record-queries';
import { detectTopology } from '../../src/db/topology';
import { recordDigest, type RecordId } from '../../src/store/record';
import { postJson, send } from '../support/http';
import {
  expectNothingLost,
  startCountingUpstream,
  stormOver,
  stormYaml,
  type StormFigures,
} from '../support/fault-storm';
import { startProxy, type TestProxy, uniqueTable } from '../support/proxy';
import { sleep, startUpstream, type TestUpstream } from '../support/upstream';
import { describeUnless, testUnless } from '../support/run-report';

const citusUrl = process.env.CITUS_URL;
const describeIfCitus = describeUnless(
  !citusUrl &&
    'CITUS_URL is not set (a Citus coordinator with two workers; see docs/store-topologies.md, "On Citus")',
  'citus.test.ts: nothing ran against Citus',
);

const TOKEN = 'citus-admin-token';
const response = {
  status: 201,
  headers: [['content-type', 'text/plain']] as [string, string][],
  body: Buffer.from('stored'),
  bodyOmitted: false,
  outcomeUnknown: false,
};

describeIfCitus('the store on a Citus distributed table', () => {
  let pool: Pool;
  let upstream: TestUpstream;
  let proxy: TestProxy;
  let other: TestProxy;

  /** The worker ports that hold the shards of these keys. */
  async function workersOf(table: string, keys: readonly string[]): Promise<number[]> {
    const { rows } = await pool.query<{ nodeport: number }>(
      `SELECT DISTINCT s.nodeport FROM unnest($2::text[]) AS k(key)
         JOIN citus_shards s ON s.shardid = get_shard_id_for_distribution_column($1::regclass, k.key)
        ORDER BY 1`,
      [table, keys],
    );
    return rows.map((row) => row.nodeport);
  }

  /** A completion statement's values for `key`, but its ttl (always last). */
  const completionValues = (key: string): unknown[] => [
    'orders',
    '',
    key,
    'fence',
    201,
    '[]',
    Buffer.from('x'),
    false,
    false,
  ];

  beforeAll(async () => {
    pool = createPool({ url: citusUrl!, size: 10, onError: () => undefined });
    const { rows } = await pool.query<{ workers: number }>(
      'SELECT count(*)::int AS workers FROM citus_get_active_worker_nodes()',
    );
    if ((rows[0]?.workers ?? 0) < 2)
      throw new Error(`CITUS_URL has ${rows[0]?.workers} active worker(s); these tests need two`);
    upstream = await startUpstream(async (req, res) => {
      await sleep(Number(req.headers['x-wait'] ?? 0));
      res.writeHead(201, { 'content-type': 'text/plain' });
      res.end(`execution ${upstream.executions().length}`);
    });
    const table = uniqueTable('citus');
    const yaml = (onConcurrent: string) => `
admin:
  token: ${TOKEN}
store:
  table: ${table}
upstreams: { api: { url: ${upstream.url} } }
defaults: { onConcurrent: ${onConcurrent}, waitTimeout: 5s }
routes:
  - { name: orders, match: { path: /orders }, upstream: api, idempotency: {} }
`;
    // Two instances on one table, as behind a load balancer; `other` waits for in-flight keys.
    proxy = await startProxy({ yaml: yaml('reject'), table, databaseUrl: citusUrl });
    other = await startProxy({ yaml: yaml('wait'), table, databaseUrl: citusUrl });
  });

  afterAll(async () => {
    await other?.close();
    await proxy?.close();
    await upstream?.close();
    await pool?.end();
  });

  beforeEach(() => {
    upstream.received.length = 0;
  });

  test('migrate distributes the table by key, once, with several instances migrating at once', async () => {
    const table = uniqueTable('citus_migrate');
    const results = await Promise.all(Array.from({ length: 4 }, () => migrate(pool, table)));
    expect(results.filter((r) => r.distributed)).toHaveLength(1);
    expect(results.map((r) => r.current)).toEqual(Array(4).fill(LATEST_VERSION));
    expect(await migrate(pool, table)).toEqual({ applied: [], current: LATEST_VERSION });
    const { rows } = await pool.query<{ column: string; shards: number }>(
      `SELECT column_to_column_name(logicalrelid, partkey) AS column,
              (SELECT count(*) FROM pg_dist_shard s WHERE s.logicalrelid = p.logicalrelid)::int AS shards
         FROM pg_dist_partition p WHERE logicalrelid = $1::regclass`,
      [table],
    );
    expect(rows[0]?.column).toBe('key');
    // Two shards per worker (migrate.ts): few shards keep each shard's batches full.
    expect(rows[0]?.shards).toBe(SHARDS_PER_NODE * 2);
    expect(await detectTopology(pool, table)).toMatchObject({
      kind: 'citus',
      distributed: true,
      nodes: 2,
      shards: SHARDS_PER_NODE * 2,
    });
    await pool.query(`DROP TABLE ${table}, ${table}_migrations`);
  });

  test('a citus.shard_count the operator set is the shard count migrate uses', async () => {
    const table = uniqueTable('citus_shards');
    const own = new Pool({ connectionString: citusUrl, options: '-c citus.shard_count=3', max: 1 });
    try {
      await migrate(own, table);
      expect(await detectTopology(pool, table)).toMatchObject({ distributed: true, shards: 3 });
    } finally {
      await own.end();
      await pool.query(`DROP TABLE IF EXISTS ${table}, ${table}_migrations`);
    }
  });

  test('a table that was not distributed yet is distributed by the next migrate, rows and all', async () => {
    const table = uniqueTable('citus_late');
    await migrate(pool, table);
    const store = new PostgresKeyStore(pool, table, { distributed: false });
    const request = {
      id: { scope: 's', tenant: '', key: 'late-1' },
      route: 'r',
      fingerprint: Buffer.from('f'),
      leaseMs: 30_000,
      claimExpiryMs: 60_000,
    };
    expect(await store.claim(request)).toMatchObject({ kind: 'claimed' });
    // As if the table had been migrated before the citus extension was created.
    await pool.query('SELECT undistribute_table($1::regclass)', [table]);
    expect(await detectTopology(pool, table)).toMatchObject({ kind: 'citus', distributed: false });
    expect(await migrate(pool, table)).toEqual({
      applied: [],
      current: LATEST_VERSION,
      distributed: true,
    });
    expect(await detectTopology(pool, table)).toMatchObject({ distributed: true, nodes: 2 });
    const distributedStore = new PostgresKeyStore(pool, table);
    expect(await distributedStore.claim(request)).toMatchObject({ kind: 'in-flight', attempts: 2 });
    await pool.query(`DROP TABLE ${table}, ${table}_migrations`);
  });

  test('concurrent duplicates of one key execute once; the repeat after completion is a replay', async () => {
    const responses = await Promise.all(
      Array.from({ length: 20 }, () =>
        postJson(`${proxy.url}/orders`, 'dup-1', { amount: 5 }, { 'x-wait': '300' }),
      ),
    );
    expect(upstream.executions()).toHaveLength(1);
    const statuses = responses.map((r) => r.status).sort();
    expect(statuses.filter((s) => s === 201)).toHaveLength(1);
    expect(statuses.filter((s) => s !== 201).every((s) => s === 409)).toBe(true);
    const winner = responses.find((r) => r.status === 201)!;
    const replay = await postJson(`${other.url}/orders`, 'dup-1', { amount: 5 });
    expect(replay.status).toBe(201);
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(replay.text()).toBe(winner.text());
    expect(upstream.executions()).toHaveLength(1);
  });

  test('a 200-way storm of one key split over both instances executes once', async () => {
    const send = (url: string) =>
      postJson(`${url}/orders`, 'storm-1', { amount: 9 }, { 'x-wait': '400' });
    const responses = await Promise.all(
      Array.from({ length: 200 }, (_, n) => send(n % 2 === 0 ? proxy.url : other.url)),
    );
    expect(upstream.executions()).toHaveLength(1);
    const byInstance = (parity: number) => responses.filter((_, n) => n % 2 === parity);
    // `proxy` refuses a key in flight (409); `other` waits for it and replays the answer.
    const first = byInstance(0).map((r) => r.status);
    expect(first.filter((status) => status !== 409).every((status) => status === 201)).toBe(true);
    const waited = byInstance(1);
    expect(waited.every((r) => r.status === 201)).toBe(true);
    const bodies = new Set(responses.filter((r) => r.status === 201).map((r) => r.text()));
    expect(bodies.size).toBe(1);
  });

  test('many new keys each execute once, and their shards are on both workers', async () => {
    const keys = Array.from({ length: 40 }, (_, i) => `spread-${i}`);
    const responses = await Promise.all(
      keys.map((key) => postJson(`${proxy.url}/orders`, key, {})),
    );
    expect(responses.every((r) => r.status === 201)).toBe(true);
    expect(upstream.executions()).toHaveLength(keys.length);
    const repeats = await Promise.all(keys.map((key) => postJson(`${other.url}/orders`, key, {})));
    expect(repeats.every((r) => r.headers['idempotent-replayed'] === 'true')).toBe(true);
    expect(upstream.executions()).toHaveLength(keys.length);
    const workers = await citusWorkerPorts(pool);
    expect(await workersOf(proxy.table, keys)).toEqual(workers);
    // The rows themselves, read on each worker from its shards.
    const { rows } = await pool.query<{ nodeport: number; rows: number }>(
      `SELECT s.nodeport, count(*)::int AS rows FROM ${proxy.table} t
         JOIN citus_shards s ON s.shardid = get_shard_id_for_distribution_column($1::regclass, t.key)
        WHERE t.key = ANY($2::text[]) GROUP BY 1 ORDER BY 1`,
      [proxy.table, keys],
    );
    expect(rows.map((r) => r.nodeport)).toEqual(workers);
    expect(rows.reduce((sum, r) => sum + r.rows, 0)).toBe(keys.length);
  });

  test('the shard map places every key on the shard Citus does', async () => {
    const keys = Array.from({ length: 300 }, (_, i) => `map-${i}-${'ü'.repeat(i % 7)}`);
    const map = await ShardMap.load(pool, proxy.table);
    const { rows } = await pool.query<{ shard: string }>(
      `SELECT get_shard_id_for_distribution_column($1::regclass, k)::text AS shard
         FROM unnest($2::text[]) WITH ORDINALITY AS u(k, n) ORDER BY n`,
      [proxy.table, keys],
    );
    expect(map.size).toBeGreaterThan(1);
    expect(keys.map((key) => map.shardIds[map.shardOf(key)])).toEqual(rows.map((r) => r.shard));
  });

  test("a batch's statement over one shard's keys goes to that shard alone", async () => {
    const map = await ShardMap.load(pool, proxy.table);
    const keys = Array.from({ length: 400 }, (_, i) => `route-${i}`);
    const sameShard = keys.filter((key) => map.shardOf(key) === map.shardOf(keys[0]!)).slice(0, 5);
    const twoShards = [keys[0]!, keys.find((key) => map.shardOf(key) !== map.shardOf(keys[0]!))!];
    const tasks = async (text: string, values: unknown[]): Promise<number> => {
      const { rows } = await pool.query<{ 'QUERY PLAN': string }>(`EXPLAIN ${text}`, values);
      const line = rows.map((row) => row['QUERY PLAN']).find((l) => l.includes('Task Count'));
      return Number(line?.match(/Task Count: (\d+)/)?.[1]);
    };
    const claimValues = (batch: string[]): unknown[] =>
      batch.flatMap((key) => [
        'orders',
        '',
        key,
        'orders',
        Buffer.alloc(32),
        randomUUID(),
        1_000,
        2_000,
      ]);
    const completeValues = (batch: string[]): unknown[] =>
      batch.flatMap((key) => [...completionValues(key), 1_000]);
    expect(await tasks(claimStatement(proxy.table, 5), claimValues(sameShard))).toBe(1);
    expect(await tasks(completeStatement(proxy.table, 5, true), completeValues(sameShard))).toBe(1);
    // The same statements over two shards' keys: what grouping by shard avoids.
    expect(await tasks(claimStatement(proxy.table, 2), claimValues(twoShards))).toBe(2);
    expect(await tasks(completeStatement(proxy.table, 2, true), completeValues(twoShards))).toBe(2);
  });

  test('a statement about one record goes to its shard alone, with nothing planned beforehand', async () => {
    // A statement Citus sends to several shards is a distributed transaction: a two-phase commit on
    // every worker, whose prepared halves hold their locks until Citus recovers them when the
    // session that ran it is cut in between. A subplan is a result copied to the worker first.
    const plan = async (text: string, values: unknown[]): Promise<string[]> => {
      const { rows } = await pool.query<{ 'QUERY PLAN': string }>(`EXPLAIN ${text}`, values);
      return rows.map((row) => row['QUERY PLAN']);
    };
    const oneTask = (lines: string[]): boolean =>
      lines.some((line) => /Task Count: 1$/.test(line)) &&
      !lines.some((line) => line.includes('Subplan'));
    const sql = buildStatements(proxy.table, true);
    const completion = completionValues('one-record');
    expect(oneTask(await plan(sql.completeOne, [...completion, 1_000]))).toBe(true);
    expect(
      oneTask(await plan(sql.completePartial, [...completion, '{}', Buffer.from('p'), 1_000])),
    ).toBe(true);
    const map = await ShardMap.load(pool, proxy.table);
    const keys = Array.from({ length: 400 }, (_, i) => `counted-${i}`);
    const sameShard = keys.filter((key) => map.shardOf(key) === map.shardOf(keys[0]!)).slice(0, 3);
    const counters = (batch: string[]): unknown[] => [
      batch.map(() => 'orders'),
      batch.map(() => ''),
      batch,
      batch.map(() => 1),
      batch.map(() => 2),
    ];
    expect(oneTask(await plan(sql.flushCounters, counters(sameShard)))).toBe(true);
  });

  test("counters flushed for keys on both workers land on each key's row", async () => {
    const store = new PostgresKeyStore(pool, proxy.table, { lanes: 1 });
    // Three keys of every shard.
    const map = await ShardMap.load(pool, proxy.table);
    const run = randomBytes(4).toString('hex');
    const candidates = Array.from({ length: 400 }, (_, i) => `flush-${run}-${i}`);
    const keys = Array.from({ length: map.size }, (_, shard) =>
      candidates.filter((key) => map.shardOf(key) === shard).slice(0, 3),
    ).flat();
    expect(keys).toHaveLength(3 * map.size);
    const ids = keys.map((key): RecordId => ({ scope: 'orders', tenant: '', key }));
    for (const id of ids) {
      const claim = await store.claim({
        id,
        route: 'orders',
        fingerprint: Buffer.alloc(32),
        leaseMs: 60_000,
        claimExpiryMs: 120_000,
      });
      if (claim.kind !== 'claimed') throw new Error(`expected a claim, got ${claim.kind}`);
      await store.complete(id, claim.fence, response, 60_000);
    }
    expect(await workersOf(proxy.table, keys)).toEqual(await citusWorkerPorts(pool));
    await store.flushCounters(ids.map((id, i) => ({ id, attempts: i + 1, replays: 2 * i })));
    const { rows } = await pool.query<{ key: string; attempts: number; replays: number }>(
      `SELECT key, attempts, replays FROM ${proxy.table} WHERE key = ANY($1::text[])`,
      [keys],
    );
    const byKey = new Map(rows.map((row) => [row.key, row]));
    keys.forEach((key, i) => {
      // The claim counted one attempt; the flush adds its own.
      expect(byKey.get(key)).toMatchObject({ attempts: 1 + i + 1, replays: 2 * i });
    });
  });

  test('concurrent new keys are claimed and completed in batches, one shard each', async () => {
    const store = new PostgresKeyStore(pool, proxy.table, { lanes: 1, maxBatch: 16 });
    const id = (key: string): RecordId => ({ scope: 'orders', tenant: '', key });
    const claim = (key: string) =>
      store.claim({
        id: id(key),
        route: 'orders',
        fingerprint: Buffer.alloc(32),
        leaseMs: 60_000,
        claimExpiryMs: 120_000,
      });
    await claim(`batch-warm-${randomBytes(4).toString('hex')}`); // layout and shard map known
    const keys = Array.from(
      { length: 120 },
      (_, i) => `batch-${randomBytes(4).toString('hex')}-${i}`,
    );
    const claims = await Promise.all(keys.map(claim));
    const fences = claims.map((result) => {
      if (result.kind !== 'claimed') throw new Error(`expected a claim, got ${result.kind}`);
      return result.fence;
    });
    const done = await Promise.all(
      keys.map((key, n) => store.complete(id(key), fences[n]!, response, 60_000)),
    );
    expect(done.every(({ landing }) => landing === 'stored')).toBe(true);
    const { claims: claimStats, completions } = store.batchStats();
    expect(claimStats.largest).toBeGreaterThan(1);
    expect(completions.largest).toBeGreaterThan(1);
    expect(claimStats.batches).toBeLessThan(claimStats.items);
    const repeats = await Promise.all(keys.map(claim));
    expect(repeats.every((repeat) => repeat.kind === 'completed')).toBe(true);
  });

  test('a repeat waiting on another instance is woken by the NOTIFY the coordinator sends', async () => {
    const notifications = other.listener.stats.notifications;
    const first = postJson(`${proxy.url}/orders`, 'wait-1', { w: 1 }, { 'x-wait': '800' });
    await sleep(150);
    const started = Date.now();
    const repeat = await postJson(`${other.url}/orders`, 'wait-1', { w: 1 });
    const original = await first;
    expect(repeat.status).toBe(201);
    expect(repeat.headers['idempotent-replayed']).toBe('true');
    expect(repeat.text()).toBe(original.text());
    expect(upstream.executions()).toHaveLength(1);
    expect(other.listener.stats.notifications).toBeGreaterThan(notifications);
    expect(Date.now() - started).toBeLessThan(2_000);
  });

  test('replayed repeats are counted on the record; the admin API reads it and clears it on every instance', async () => {
    await postJson(`${proxy.url}/orders`, 'admin-1', { a: 1 });
    await postJson(`${other.url}/orders`, 'admin-1', { a: 1 }); // other learns it from the store …
    await postJson(`${other.url}/orders`, 'admin-1', { a: 1 }); // … and answers from memory
    await other.flushCounters();
    const path = `/keys/orders/admin-1`;
    const auth = { authorization: `Bearer ${TOKEN}` };
    const record = (await send(`${proxy.adminUrl}${path}`, { method: 'GET', headers: auth })).json<{
      attempts: number;
      replays: number;
      history: { event: string }[];
    }>();
    expect(record).toMatchObject({ attempts: 3, replays: 2 });
    expect(record.history.map((e) => e.event)).toEqual(['claimed', 'completed']);
    expect(await findRecordsByKey(pool, proxy.table, 'admin-1')).toHaveLength(1);
    const cleared = await send(`${proxy.adminUrl}${path}`, { method: 'DELETE', headers: auth });
    expect(cleared.json()).toMatchObject({ deleted: true });
    await sleep(100); // the eviction NOTIFY is delivered when the DELETE commits
    const again = await postJson(`${other.url}/orders`, 'admin-1', { a: 1 });
    expect(again.headers['idempotent-replayed']).toBeUndefined();
    expect(upstream.executions()).toHaveLength(2);
  });

  test('takeover after a lease ends, then settling as unknown, with the history and NOTIFY of each', async () => {
    const store = new PostgresKeyStore(pool, proxy.table);
    const id: RecordId = {
      scope: 'orders',
      tenant: '',
      key: `takeover-${randomBytes(3).toString('hex')}`,
    };
    const request = {
      id,
      route: 'orders',
      fingerprint: Buffer.from('fp'),
      leaseMs: 100,
      claimExpiryMs: 60_000,
    };
    const claimed = await store.claim(request);
    if (claimed.kind !== 'claimed') throw new Error(`expected a claim, got ${claimed.kind}`);
    const first = claimed.fence;
    const inFlight = await store.claim(request);
    expect(inFlight).toMatchObject({ kind: 'in-flight', attempts: 2, fence: first });
    if (inFlight.kind === 'in-flight') expect(inFlight.leaseRemainingMs).toBeLessThanOrEqual(100);
    expect(await store.takeOver(id, first, 100, 60_000)).toBeNull(); // the lease has not ended
    expect(await store.peek(id, Buffer.from('fp'))).toMatchObject({ kind: 'in-flight' });
    await sleep(150);
    const second = await store.takeOver(id, first, 100, 60_000);
    expect(second).not.toBeNull();
    expect(second).not.toBe(first);
    await sleep(150);
    const listener = await listen(citusUrl!, completionChannel(proxy.table));
    try {
      expect(await store.settleUnknown(id, first, response, 60_000)).toBeNull(); // stale
      const settled = await store.settleUnknown(id, second!, response, 60_000);
      expect(settled).toMatchObject({ status: 201, outcomeUnknown: true });
      expect(await listener.next(id)).toBe(true); // attempts > 1: waiters are nudged
    } finally {
      await listener.close();
    }
    const record = await findRecord(pool, proxy.table, id);
    expect(record?.history.map((e) => [e.event, e.fence])).toEqual([
      ['claimed', 1],
      ['taken_over', 2],
      ['settled_unknown', 2],
    ]);
    const replay = await store.claim(request);
    expect(replay).toMatchObject({ kind: 'completed', attempts: 3 });
    if (replay.kind === 'completed') expect(replay.expiresInMs).toBeGreaterThan(59_000);
  });

  test('a release and a completion with waiters nudge them from the coordinator', async () => {
    const store = new PostgresKeyStore(pool, proxy.table);
    const listener = await listen(citusUrl!, completionChannel(proxy.table));
    try {
      for (const outcome of ['release', 'complete'] as const) {
        const id: RecordId = { scope: 'orders', tenant: '', key: `nudge-${outcome}` };
        const request = {
          id,
          route: 'orders',
          fingerprint: Buffer.from('fp'),
          leaseMs: 5_000,
          claimExpiryMs: 60_000,
        };
        const claimed = await store.claim(request);
        if (claimed.kind !== 'claimed') throw new Error(`expected a claim, got ${claimed.kind}`);
        await store.claim(request); // a repeat saw it: attempts 2
        const changed =
          outcome === 'release'
            ? await store.release(id, claimed.fence)
            : (await store.complete(id, claimed.fence, response, 60_000)).landing;
        expect(changed).toBe('stored');
        expect(await listener.next(id)).toBe(true);
      }
    } finally {
      await listener.close();
    }
  });

  test('prune deletes expired records on every shard, in batches, and leaves live ones', async () => {
    const table = uniqueTable('citus_prune');
    await migrate(pool, table);
    const store = new PostgresKeyStore(pool, table);
    const ids = Array.from({ length: 45 }, (_, i) => ({ scope: 's', tenant: '', key: `p${i}` }));
    for (const id of ids) {
      const claim = await store.claim({
        id,
        route: 'r',
        fingerprint: Buffer.from('f'),
        leaseMs: 1_000,
        claimExpiryMs: 60_000,
      });
      if (claim.kind === 'claimed') await store.complete(id, claim.fence, response, 60_000);
    }
    await pool.query(
      `UPDATE ${table} SET expires_at = now() - interval '1 s', prune_after = now() - interval '1 s'
        WHERE key <> ALL($1::text[])`,
      [['p0', 'p1', 'p2', 'p3', 'p4']],
    );
    expect(await pruneExpired(pool, table, { batchSize: 15 })).toEqual({
      deleted: 40,
      batches: 3,
      skipped: false,
    });
    const { rows } = await pool.query<{ key: string }>(`SELECT key FROM ${table} ORDER BY key`);
    expect(rows.map((r) => r.key)).toEqual(['p0', 'p1', 'p2', 'p3', 'p4']);
    expect(await deleteRecord(pool, table, ids[0]!)).toBe(true);
    expect(await deleteRecord(pool, table, ids[0]!)).toBe(false);
    await pool.query(`DROP TABLE ${table}, ${table}_migrations`);
  });
});

// Storms of fresh keys over two instances while their sessions are cut: on the workers (the
// coordinator's connections to the shards, mid-statement) and on the coordinator (the proxies' own
// sessions, their listener's included). Only the storm's own sessions are cut, found by their
// application_name, so other tests on the same cluster go on. Afterwards every key is retried: none
// ran twice, every 2xx a first client got replays, no key that never ran is answered unknown.
describeIfCitus('fault storms on Citus', () => {
  const APP = `citus-storm-${process.pid}`;
  let pool: Pool;
  let upstream: Awaited<ReturnType<typeof startCountingUpstream>>;
  let proxies: TestProxy[] = [];

  beforeAll(async () => {
    pool = createPool({ url: citusUrl!, size: 2, onError: () => undefined });
    upstream = await startCountingUpstream();
    const url = new URL(citusUrl!);
    url.searchParams.set('application_name', APP);
    const table = uniqueTable('citus_storm');
    const yaml = stormYaml(upstream.url);
    for (let i = 0; i < 2; i++)
      proxies.push(await startProxy({ yaml, table, databaseUrl: url.toString() }));
  }, 120_000);

  afterAll(async () => {
    for (const instance of proxies) await instance.close();
    proxies = [];
    await upstream?.close();
    await pool?.end();
  });

  /** The storm's sessions on the coordinator, and the global pids Citus names their worker sessions by. */
  async function ourSessions(): Promise<{ pids: number[]; internal: string[] }> {
    const { rows } = await pool.query<{ pid: number; internal: string }>(
      `SELECT a.pid, 'citus_internal gpid=' || (n.nodeid::bigint * 10000000000 + a.pid) AS internal
         FROM pg_stat_activity a, pg_dist_node n
        WHERE a.application_name = $1 AND n.groupid = 0`,
      [APP],
    );
    return { pids: rows.map((r) => r.pid), internal: rows.map((r) => r.internal) };
  }

  /** Ends the workers' sessions that serve the storm's coordinator sessions; how many. */
  async function cutOnWorkers(): Promise<number> {
    const { internal } = await ourSessions();
    const { rows } = await pool.query<{ result: string }>(
      `SELECT result FROM run_command_on_workers($$
         SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
          WHERE application_name = ANY('{${internal.join(',')}}'::text[])$$)`,
    );
    return rows.reduce((sum, row) => sum + Number(row.result), 0);
  }

  /** Ends the storm's own sessions on the coordinator; how many. */
  async function cutOnCoordinator(): Promise<number> {
    const { pids } = await ourSessions();
    const { rows } = await pool.query<{ n: number }>(
      'SELECT count(pg_terminate_backend(pid))::int AS n FROM unnest($1::int[]) AS p(pid)',
      [pids],
    );
    return rows[0]?.n ?? 0;
  }

  const storm = (name: string, fault: () => Promise<void>): Promise<StormFigures> =>
    stormOver(upstream, proxies, name, fault);

  /** Ten rounds of `cut`, 150 ms apart, under a storm; how many sessions were ended. */
  async function stormCutting(name: string, cut: () => Promise<number>): Promise<StormFigures> {
    let ended = 0;
    const figures = await storm(name, async () => {
      for (let round = 0; round < 10; round++) {
        ended += await cut();
        await sleep(150);
      }
    });
    expect(ended).toBeGreaterThan(0);
    return figures;
  }

  // Open: under load (a CI run) this storm has lost answers to retries answered 503 right after
  // it, and once timed out; the coordinator keeps one connection per worker per session, and each
  // dead one fails the next statement on it. Run it with CITUS_WORKER_CUTS=1 until that is fixed.
  testUnless(
    process.env.CITUS_WORKER_CUTS !== '1' &&
      'open: worker cuts can still cost answers under load (set CITUS_WORKER_CUTS=1 to run it)',
    'citus.test.ts: the worker-cut storm',
  )(
    'ten rounds of cutting the sessions on the workers that serve the proxies',
    async () => {
      const figures = await stormCutting('workers', cutOnWorkers);
      expectNothingLost(__filename, 'Citus: worker sessions terminated x10', figures);
    },
    120_000,
  );

  test("ten rounds of pg_terminate_backend of the proxies' sessions on the coordinator", async () => {
    const figures = await stormCutting('coordinator', cutOnCoordinator);
    expectNothingLost(__filename, 'Citus: coordinator sessions terminated x10', figures);
    // The outbox had work: completions or releases whose statement died were sent again.
    expect(figures.store?.retries ?? 0).toBeGreaterThan(0);
  }, 120_000);
});

/** The active workers' ports, in order. */
async function citusWorkerPorts(pool: Pool): Promise<number[]> {
  const { rows } = await pool.query<{ node_port: number }>(
    'SELECT node_port::int FROM citus_get_active_worker_nodes() ORDER BY 1',
  );
  return rows.map((row) => row.node_port);
}

/** A LISTEN on the coordinator; next(id) says whether id's digest arrives within a second. */
async function listen(
  url: string,
  channel: string,
): Promise<{ next(id: RecordId): Promise<boolean>; close(): Promise<void> }> {
  const client = new Client({ connectionString: url });
  await client.connect();
  const seen: string[] = [];
  client.on('notification', (n) => seen.push(n.payload ?? ''));
  await client.query(`LISTEN "${channel}"`);
  return {
    async next(id) {
      const digest = recordDigest(id);
      for (let i = 0; i < 50 && !seen.includes(digest); i++) await sleep(20);
      return seen.includes(digest);
    },
    close: () => client.end(),
  };
}
