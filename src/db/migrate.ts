// Applies MIGRATIONS to the configured table. Safe to run from many replicas at once: a run is one
// transaction that first takes a transaction-level advisory lock (keyed by the table name), so
// replicas serialise, each due migration is applied in order with its version row, and a crash
// mid-way leaves the schema as it was. The lock ends with the transaction: behind a transaction
// pooler (PgBouncer in transaction mode) a session lock would stay on whichever server connection
// took it, and its unlock could reach another.
//
// With the citus extension (docs/store-topologies.md), the same transaction then makes the keys table a
// distributed table, sharded by `key`, when it is not one yet: on the first migrate, and on the
// first one after Citus was added to a database that already had the table (its rows move into the
// shards). The check runs under the lock, so of several replicas exactly one distributes it.
import type { Pool, PoolClient } from 'pg';
import { quoteTableName } from './identifier';
import { MIGRATIONS } from './migrations';
import { inTransaction } from './transaction';
import { DISTRIBUTION_COLUMN, hasCitus, isDistributed } from './topology';

export interface MigrationResult {
  readonly applied: readonly number[];
  readonly current: number;
  /** Set when this run made the table a Citus distributed table. */
  readonly distributed?: true;
}

export async function migrate(pool: Pool, tableName: string): Promise<MigrationResult> {
  const table = quoteTableName(tableName);
  const versions = quoteTableName(`${tableName}_migrations`);
  const lockKey = `idempotency-proxy:migrate:${tableName}`;
  return inTransaction(pool, async (client) => {
    await client.query('SELECT pg_advisory_xact_lock(hashtext($1::text))', [lockKey]);
    const citus = await hasCitus(client);
    // A migration that writes to a distributed table and then alters it (or the other way round)
    // must use one connection per worker, or Citus refuses the DDL after the parallel write.
    if (citus) await client.query("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'");
    await client.query(
      `CREATE TABLE IF NOT EXISTS ${versions} (
         version    integer PRIMARY KEY,
         name       text NOT NULL,
         applied_at timestamptz NOT NULL DEFAULT now()
       )`,
    );
    const done = await appliedVersions(client, versions);
    const applied: number[] = [];
    for (const migration of MIGRATIONS) {
      if (done.has(migration.version)) continue;
      await client.query(migration.sql(table, tableName));
      await client.query(`INSERT INTO ${versions} (version, name) VALUES ($1::int, $2::text)`, [
        migration.version,
        migration.name,
      ]);
      applied.push(migration.version);
    }
    const distributed = citus && (await distribute(client, tableName));
    const current = Math.max(0, ...done, ...applied);
    return distributed ? { applied, current, distributed } : { applied, current };
  });
}

/** The newest schema version this build knows. */
export const LATEST_VERSION = Math.max(...MIGRATIONS.map((m) => m.version));

/** Shards per worker node for a new distributed table, unless citus.shard_count is set. */
export const SHARDS_PER_NODE = 2;

/**
 * Makes the keys table a distributed table unless it is one. colocate_with => 'none': the table
 * joins no other, so it gets a colocation group of its own that nothing else's rebalancing moves.
 *
 * Shard count: the store batches claims and completions per shard (key-store.ts), so the fewer the
 * shards the fuller each statement. Citus's default of 32 left 2–3 keys per statement at 64
 * concurrent requests on two workers (0.74 statements per new key, 479 req/s); 2 per worker gives
 * 0.35 and 1 133 req/s, and still lets a rebalance spread the table over twice as many workers
 * before a shard needs splitting (docs/store-topologies.md). A citus.shard_count that an operator
 * set (for the database, the role or the server) is theirs and is used as it is.
 */
async function distribute(client: PoolClient, tableName: string): Promise<boolean> {
  if (await isDistributed(client, tableName)) return false;
  const { rows } = await client.query<{ chosen: boolean; workers: number }>(
    `SELECT (SELECT source <> 'default' FROM pg_settings WHERE name = 'citus.shard_count') AS chosen,
            (SELECT count(*)::int FROM citus_get_active_worker_nodes()) AS workers`,
  );
  const shards = rows[0]?.chosen ? null : SHARDS_PER_NODE * Math.max(1, rows[0]?.workers ?? 1);
  await client.query(
    `SELECT create_distributed_table($1::text::regclass, $2::text, colocate_with => 'none',
                                     shard_count => coalesce($3::int, current_setting('citus.shard_count')::int))`,
    [quoteTableName(tableName), DISTRIBUTION_COLUMN, shards],
  );
  return true;
}

async function appliedVersions(client: PoolClient, versions: string): Promise<Set<number>> {
  const { rows } = await client.query<{ version: number }>(`SELECT version FROM ${versions}`);
  return new Set(rows.map((row) => row.version));
}
