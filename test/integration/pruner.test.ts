// Retention: the pruner deletes only expired rows, in batches, from one instance at a time.
import { pruneExpired } from '../../src/store/postgres/pruner';
import { quoteTableName } from '../../src/db/identifier';
import { migrate } from '../../src/db/migrate';
import { createPool } from '../../src/db/pool';
import { databaseUrl, uniqueTable } from '../support/proxy';

const pool = createPool({ url: databaseUrl(), size: 4, onError: () => undefined });
afterAll(() => pool.end());

async function seed(table: string, expired: number, live: number): Promise<void> {
  const t = quoteTableName(table);
  await pool.query(
    `INSERT INTO ${t} (scope, key, route, fingerprint, state, claim_token, expires_at, prune_after)
     SELECT 'orders', 'expired-' || i, 'orders', '\\x00', 'completed', gen_random_uuid(), now() - interval '1 minute', now() - interval '1 minute'
     FROM generate_series(1, $1::int) AS i`,
    [expired],
  );
  await pool.query(
    `INSERT INTO ${t} (scope, key, route, fingerprint, state, claim_token, expires_at, prune_after)
     SELECT 'orders', 'live-' || i, 'orders', '\\x00', 'completed', gen_random_uuid(), now() + interval '1 hour', now() + interval '1 hour'
     FROM generate_series(1, $1::int) AS i`,
    [live],
  );
}

test('deletes only expired rows, in batches', async () => {
  const table = uniqueTable('prune');
  await migrate(pool, table);
  await seed(table, 95, 30);
  const result = await pruneExpired(pool, table, { batchSize: 20 });
  expect(result).toEqual({ deleted: 95, batches: 5, skipped: false });
  const { rows } = await pool.query<{ key: string }>(`SELECT key FROM ${quoteTableName(table)}`);
  expect(rows).toHaveLength(30);
  expect(rows.every((r) => r.key.startsWith('live-'))).toBe(true);
  expect(await pruneExpired(pool, table, { batchSize: 20 })).toEqual({
    deleted: 0,
    batches: 1,
    skipped: false,
  });
});

test('stops after maxBatches and leaves the rest for the next round', async () => {
  const table = uniqueTable('prune');
  await migrate(pool, table);
  await seed(table, 50, 0);
  expect(await pruneExpired(pool, table, { batchSize: 10, maxBatches: 2 })).toEqual({
    deleted: 20,
    batches: 2,
    skipped: false,
  });
  expect((await pruneExpired(pool, table, { batchSize: 100 })).deleted).toBe(30);
});

test('runs on one instance at a time: another holder of the prune lock makes it skip', async () => {
  const table = uniqueTable('prune');
  await migrate(pool, table);
  await seed(table, 10, 0);
  const other = await pool.connect();
  try {
    await other.query('SELECT pg_advisory_lock(hashtext($1::text))', [
      `idempotency-proxy:prune:${table}`,
    ]);
    expect(await pruneExpired(pool, table)).toEqual({ deleted: 0, batches: 0, skipped: true });
    await other.query('SELECT pg_advisory_unlock(hashtext($1::text))', [
      `idempotency-proxy:prune:${table}`,
    ]);
  } finally {
    other.release();
  }
  expect((await pruneExpired(pool, table)).deleted).toBe(10);
});

test('two instances pruning at once delete every expired row exactly once', async () => {
  const table = uniqueTable('prune');
  await migrate(pool, table);
  await seed(table, 500, 5);
  const results = await Promise.all([
    pruneExpired(pool, table, { batchSize: 50, pauseMs: 5 }),
    pruneExpired(pool, table, { batchSize: 50, pauseMs: 5 }),
  ]);
  expect(results.reduce((sum, r) => sum + r.deleted, 0)).toBe(500);
  const { rows } = await pool.query(`SELECT count(*)::int AS n FROM ${quoteTableName(table)}`);
  expect(rows[0].n).toBe(5);
});
