// Applies MIGRATIONS to the configured table. Safe to run from many replicas at once: a run is one
// transaction that first takes a transaction-level advisory lock (keyed by the table name), so
// replicas serialise, each due migration is applied in order with its version row, and a crash
// mid-way leaves the schema as it was. The lock ends with the transaction: behind a transaction
// pooler (PgBouncer in transaction mode) a session lock would stay on whichever server connection
// took it, and its unlock could reach another.
import type { Pool, PoolClient } from 'pg';
import { quoteTableName } from './identifier';
import { MIGRATIONS } from './migrations';

export interface MigrationResult {
  readonly applied: readonly number[];
  readonly current: number;
}

export async function migrate(pool: Pool, tableName: string): Promise<MigrationResult> {
  const table = quoteTableName(tableName);
  const versions = quoteTableName(`${tableName}_migrations`);
  const lockKey = `idempotency-proxy:migrate:${tableName}`;
  const client = await pool.connect();
  let failed: unknown;
  try {
    await client.query('BEGIN');
    await client.query('SELECT pg_advisory_xact_lock(hashtext($1::text))', [lockKey]);
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
    await client.query('COMMIT');
    return { applied, current: Math.max(0, ...done, ...applied) };
  } catch (error) {
    failed = error;
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  } finally {
    // A connection that failed mid-transaction is not handed out again.
    client.release(failed instanceof Error ? failed : undefined);
  }
}

/** The newest schema version this build knows. */
export const LATEST_VERSION = Math.max(...MIGRATIONS.map((m) => m.version));

async function appliedVersions(client: PoolClient, versions: string): Promise<Set<number>> {
  const { rows } = await client.query<{ version: number }>(`SELECT version FROM ${versions}`);
  return new Set(rows.map((row) => row.version));
}
