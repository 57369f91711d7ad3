// Claims and completions that arrive together share one statement (natural batching), and every row
// still gets its own answer: claimed, replayed, in flight, mismatch, expired; its own response, ttl
// and fence check; waiters are nudged; a deadlock between batches is retried row by row — against
// the real PostgreSQL.
import { Client } from 'pg';
import { PostgresKeyStore } from '../../src/store/postgres/key-store';
import { completionChannel } from '../../src/store/postgres/statements';
import { quoteTableName } from '../../src/db/identifier';
import { migrate } from '../../src/db/migrate';
import { createPool } from '../../src/db/pool';
import { type RecordId, recordDigest, type StoredResponse } from '../../src/store/record';
import { until } from '../support/eventually';
import { sleep } from '../support/upstream';
import { databaseUrl, uniqueTable } from '../support/proxy';
import { testUnless } from '../support/run-report';
import { plainPostgresOnly } from '../support/store-kind';

const pool = createPool({ url: databaseUrl(), size: 4, onError: () => undefined });
afterAll(() => pool.end());

const fingerprint = Buffer.alloc(32, 7);
const idFor = (key: string): RecordId => ({ scope: 'orders', tenant: '', key });
const responseFor = (n: number, bodyOmitted = false): StoredResponse => ({
  status: 200 + n,
  headers: [['x-n', String(n)]],
  body: Buffer.from(`body-${n}`),
  bodyOmitted,
  outcomeUnknown: n % 2 === 1,
});

async function claim(store: PostgresKeyStore, key: string, leaseMs = 60_000): Promise<string> {
  const result = await store.claim({
    id: idFor(key),
    route: 'orders',
    fingerprint,
    leaseMs,
    claimExpiryMs: leaseMs + 3_600_000,
  });
  if (result.kind !== 'claimed' && result.kind !== 'in-flight') throw new Error(result.kind);
  return result.fence;
}

test('concurrent completions share statements, and each row gets its own response, ttl and fence check', async () => {
  const table = uniqueTable('batch');
  await migrate(pool, table);
  const store = new PostgresKeyStore(pool, table, { lanes: 1, maxBatch: 16 });
  const keys = Array.from({ length: 30 }, (_, n) => `k-${n}`);
  const fences = await Promise.all(keys.map((key) => claim(store, key)));

  // A holder whose claim was taken over: its completion must not land.
  const staleFence = await claim(store, 'stale', 1);
  await sleep(20); // the 1 ms lease runs out
  const newFence = await store.takeOver(idFor('stale'), staleFence, 60_000, 3_660_000);
  expect(newFence).not.toBeNull();

  // A key someone is waiting on (a repeat saw it in flight): its completion is announced.
  await claim(store, 'watched');
  const watchedFence = (await claim(store, 'watched')) as string; // the repeat: attempts 2
  const listener = new Client({ connectionString: databaseUrl() });
  await listener.connect();
  const heard: string[] = [];
  listener.on('notification', (message) => heard.push(message.payload ?? ''));
  await listener.query(`LISTEN "${completionChannel(table)}"`);

  try {
    const results = await Promise.all([
      ...keys.map((key, n) =>
        store.complete(idFor(key), fences[n]!, responseFor(n, n === 3), 1_000 * (n + 1)),
      ),
      store.complete(idFor('stale'), staleFence, responseFor(99), 1_000),
      store.complete(idFor('watched'), watchedFence, responseFor(40), 1_000),
    ]);
    expect(results.map(({ landing }) => landing)).toEqual([
      ...keys.map(() => 'stored'),
      'stale',
      'stored',
    ]);

    const stats = store.batchStats().completions;
    expect(stats.items).toBe(32);
    expect(stats.batches).toBeLessThan(stats.items);
    expect(stats.largest).toBeGreaterThan(1);
    expect(stats.largest).toBeLessThanOrEqual(16);

    const { rows } = await pool.query<{
      key: string;
      state: string;
      status: number;
      headers: [string, string][];
      body: Buffer | null;
      body_omitted: boolean;
      outcome_unknown: boolean;
      lifetime_ms: number;
    }>(
      `SELECT key, state, status, headers, body, body_omitted, outcome_unknown,
              round(extract(epoch FROM expires_at - completed_at) * 1000)::int AS lifetime_ms
       FROM ${quoteTableName(table)} WHERE key LIKE 'k-%'`,
    );
    expect(rows).toHaveLength(30);
    for (const row of rows) {
      const n = Number(row.key.slice(2));
      expect(row).toEqual({
        key: `k-${n}`,
        state: 'completed',
        status: 200 + n,
        headers: [['x-n', String(n)]],
        body: n === 3 ? null : Buffer.from(`body-${n}`),
        body_omitted: n === 3,
        outcome_unknown: n % 2 === 1,
        lifetime_ms: 1_000 * (n + 1),
      });
    }
    const stale = await pool.query<{ state: string; status: number | null }>(
      `SELECT state, status FROM ${quoteTableName(table)} WHERE key = 'stale'`,
    );
    expect(stale.rows).toEqual([{ state: 'in_progress', status: null }]);

    await until(() => heard.length > 0, 'the completion NOTIFY', { timeoutMs: 2_000 });
    expect(heard).toEqual([recordDigest(idFor('watched'))]);
  } finally {
    await listener.end();
  }
});

test('a lone completion is stored at once, by a statement of its own', async () => {
  const table = uniqueTable('batch');
  await migrate(pool, table);
  const store = new PostgresKeyStore(pool, table);
  const fence = await claim(store, 'alone');
  await expect(store.complete(idFor('alone'), fence, responseFor(1), 5_000)).resolves.toMatchObject(
    {
      landing: 'stored',
    },
  );
  expect(store.batchStats().completions).toEqual({ batches: 1, items: 1, largest: 1 });
  await expect(store.complete(idFor('alone'), fence, responseFor(2), 5_000)).resolves.toEqual({
    landing: 'stale',
  });
});

test('concurrent claims share statements, and each request gets its own answer', async () => {
  const table = uniqueTable('batch');
  await migrate(pool, table);
  const store = new PostgresKeyStore(pool, table, { lanes: 1, maxBatch: 16 });
  // Records that exist before the burst: completed, in flight, expired.
  const doneFence = await claim(store, 'done');
  await store.complete(idFor('done'), doneFence, responseFor(5), 60_000);
  const runningFence = await claim(store, 'running');
  const expiredFence = await claim(store, 'expired');
  await pool.query(
    `UPDATE ${quoteTableName(table)} SET expires_at = now() - interval '1 second' WHERE key = 'expired'`,
  );

  const other = Buffer.alloc(32, 9);
  const burst = [
    ...Array.from({ length: 20 }, (_, n) => ({ key: `new-${n}`, fingerprint })),
    { key: 'new-0', fingerprint }, // a repeat inside the burst: never in the same statement
    { key: 'done', fingerprint },
    { key: 'done', fingerprint: other },
    { key: 'running', fingerprint },
    { key: 'expired', fingerprint },
  ];
  const results = await Promise.all(
    burst.map(({ key, fingerprint: print }) =>
      store.claim({
        id: idFor(key),
        route: 'orders',
        fingerprint: print,
        leaseMs: 60_000,
        claimExpiryMs: 3_660_000,
      }),
    ),
  );
  const kinds = results.map((r) => r.kind);
  expect(kinds.slice(1, 20)).toEqual(Array.from({ length: 19 }, () => 'claimed'));
  // new-0 twice: whichever reached PostgreSQL first holds it, the other sees it in flight.
  expect([kinds[0], kinds[20]].sort()).toEqual(['claimed', 'in-flight']);
  expect(results[21]).toMatchObject({ kind: 'completed', response: { status: 205 } });
  // The two requests for `done` run in either order (the second is a repeat of a key being claimed,
  // so it runs alone, beside the batch): each counts one attempt.
  expect(results[22]).toMatchObject({ kind: 'mismatch' });
  expect([results[21]!.attempts, results[22]!.attempts].sort()).toEqual([2, 3]);
  expect(results[23]).toMatchObject({ kind: 'in-flight', fence: runningFence, attempts: 2 });
  expect(results[24]).toMatchObject({ kind: 'claimed', attempts: 1 });
  expect((results[24] as { fence: string }).fence).not.toBe(expiredFence); // claimed afresh

  const stats = store.batchStats().claims;
  expect(stats.batches).toBeLessThan(stats.items);
  expect(stats.largest).toBeGreaterThan(1);
  const { rows } = await pool.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM ${quoteTableName(table)} WHERE key LIKE 'new-%' AND state = 'in_progress'`,
  );
  expect(rows[0]!.n).toBe(20);
});

// On Citus a batch holds one shard's keys and its lock waits happen on a worker, where this test
// cannot see or stage them.
testUnless(
  plainPostgresOnly('a deadlock staged between two sessions of one server'),
  'batched-store.test.ts: a deadlock between batches',
)(
  'a batch cancelled by a deadlock is retried row by row, and every request still gets its answer',
  async () => {
    const table = uniqueTable('batch');
    await migrate(pool, table);
    const store = new PostgresKeyStore(pool, table, { lanes: 1, maxBatch: 16 });
    await claim(store, 'a');
    await claim(store, 'b');
    const t = quoteTableName(table);

    // Another session holds row b; it will ask for row a once our batch holds a and waits for b.
    const other = new Client({ connectionString: databaseUrl() });
    await other.connect();
    try {
      await other.query(`SET deadlock_timeout = '30s'`); // so that PostgreSQL cancels our batch, not it
      await other.query('BEGIN');
      await other.query(`SELECT 1 FROM ${t} WHERE key = 'b' FOR UPDATE`);

      const request = (key: string) =>
        store.claim({
          id: idFor(key),
          route: 'orders',
          fingerprint,
          leaseMs: 60_000,
          claimExpiryMs: 3_660_000,
        });
      const first = request('lane'); // takes the only lane, so a and b queue and go together
      const a = request('a');
      const b = request('b');
      await first;
      // Wait until the batch [a, b] holds a and waits for b.
      await until(async () => {
        const { rows } = await pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_stat_activity
         WHERE wait_event_type = 'Lock' AND query LIKE '%INSERT INTO ' || $1::text || '%'`,
          [t],
        );
        return rows[0]!.n > 0;
      }, 'the batch to wait for row b');
      await other.query(`SELECT 1 FROM ${t} WHERE key = 'a' FOR UPDATE`); // deadlock: PostgreSQL cancels the batch
      await other.query('COMMIT');

      await expect(a).resolves.toMatchObject({ kind: 'in-flight', attempts: 2 });
      await expect(b).resolves.toMatchObject({ kind: 'in-flight', attempts: 2 });
      // lane, then [a, b] (cancelled), then a and b alone.
      expect(store.batchStats().claims).toEqual({ batches: 6, items: 7, largest: 2 });
    } finally {
      await other.end();
    }
  },
  20_000,
);

// Batches travel as arrays (one per column, unnested): every byte of a body, header text with the
// characters an array literal escapes, and an omitted body (NULL) must come back exactly.
const awkward = (n: number): StoredResponse => ({
  status: 201,
  headers: [
    ['x-quote', `a "quoted" \\ back\\slash, {braces}, comma ${n}`],
    ['x-empty', ''],
    ['x-null-word', 'NULL'],
  ],
  body: Buffer.from(Array.from({ length: 256 }, (_, b) => (b + n) % 256)),
  bodyOmitted: false,
  outcomeUnknown: false,
});

/** Twelve awkward answers stored in batches of one shape, and read back. */
async function roundTrip(distributed: boolean): Promise<void> {
  const table = uniqueTable(distributed ? 'onerow' : 'arrays');
  await migrate(pool, table);
  const store = new PostgresKeyStore(pool, table, { lanes: 1, maxBatch: 16, distributed });
  const keys = Array.from({ length: 12 }, (_, n) => `awkward-${n}`);
  const fences = await Promise.all(keys.map((key) => claim(store, key)));
  const stored = await Promise.all(
    keys.map((key, n) =>
      store.complete(
        idFor(key),
        fences[n]!,
        n === 5 ? { ...awkward(n), body: Buffer.alloc(0), bodyOmitted: true } : awkward(n),
        60_000,
      ),
    ),
  );
  expect(stored.map(({ landing }) => landing)).toEqual(keys.map(() => 'stored'));
  const repeats = await Promise.all(
    keys.map((key) =>
      store.claim({
        id: idFor(key),
        route: 'orders',
        fingerprint,
        leaseMs: 1_000,
        claimExpiryMs: 2_000,
      }),
    ),
  );
  repeats.forEach((repeat, n) => {
    expect(repeat.kind).toBe('completed');
    if (repeat.kind !== 'completed') return;
    const expected = awkward(n);
    expect(repeat.response.headers).toEqual(expected.headers);
    if (n === 5) expect(repeat.response.bodyOmitted).toBe(true);
    else expect(Buffer.compare(repeat.response.body, expected.body)).toBe(0);
  });
  // Both shapes carried several calls per statement (on plain PostgreSQL there is no shard map: one
  // group).
  const { claims, completions } = store.batchStats();
  expect(claims.largest).toBeGreaterThan(1);
  expect(completions.largest).toBeGreaterThan(1);
}

// The array shape is plain PostgreSQL's: a Citus table is never sent one.
testUnless(
  plainPostgresOnly('the unnest shape of one table'),
  'batched-store.test.ts: batches as arrays',
)('bodies and headers round-trip exactly, batched (unnest)', () => roundTrip(false));
test('bodies and headers round-trip exactly, as VALUES rows, as on Citus', () => roundTrip(true));
