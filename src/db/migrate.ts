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

/**
 * Makes the keys table a distributed table unless it is one. colocate_with => 'none': the table
 * joins no other, so it gets a colocation group of its own that nothing else's rebalancing moves.
 */
async function distribute(client: PoolClient, tableName: string): Promise<boolean> {
  if (await isDistributed(client, tableName)) return false;
  await client.query(
    "SELECT create_distributed_table($1::text::regclass, $2::text, colocate_with => 'none')",
    [quoteTableName(tableName), DISTRIBUTION_COLUMN],
  );
  return true;
}

async function appliedVersions(client: PoolClient, versions: string): Promise<Set<number>> {
  const { rows } = await client.query<{ version: number }>(`SELECT version FROM ${versions}`);
  return new Set(rows.map((row) => row.version));
}
