// Completions that arrive together are stored by one statement (natural batching) with every row's
// own response, ttl and fence check, and waiters are still nudged — against the real PostgreSQL.
import { Client } from 'pg';
import { completionChannel, PostgresKeyStore } from '../../src/db/key-store';
import { quoteTableName } from '../../src/db/identifier';
import { migrate } from '../../src/db/migrate';
import { createPool } from '../../src/db/pool';
import { type RecordId, recordDigest, type StoredResponse } from '../../src/idempotency/record';
import { sleep } from '../support/upstream';
import { databaseUrl, uniqueTable } from '../support/proxy';

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
  const store = new PostgresKeyStore(pool, table, { completionLanes: 1, maxCompletionBatch: 16 });
  const keys = Array.from({ length: 30 }, (_, n) => `k-${n}`);
  const fences = await Promise.all(keys.map((key) => claim(store, key)));

  // A holder whose claim was taken over: its completion must not land.
  const staleFence = await claim(store, 'stale', 1);
  await sleep(20);
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
    expect(results).toEqual([...keys.map(() => true), false, true]);

    const stats = store.completionStats();
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

    for (let waited = 0; heard.length === 0 && waited < 2_000; waited += 20) await sleep(20);
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
  await expect(store.complete(idFor('alone'), fence, responseFor(1), 5_000)).resolves.toBe(true);
  expect(store.completionStats()).toEqual({ batches: 1, items: 1, largest: 1 });
  await expect(store.complete(idFor('alone'), fence, responseFor(2), 5_000)).resolves.toBe(false);
});
