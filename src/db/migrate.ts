// Applies MIGRATIONS to the configured table. Safe to run from many replicas at once: a session-level
// advisory lock (keyed by the table name) serialises them, and each migration commits with its
// version row, so a crash mid-way leaves either all of a migration or none of it.
import type { Pool, PoolClient } from 'pg';
import { quoteTableName } from './identifier';
import { MIGRATIONS, type Migration } from './migrations';

export interface MigrationResult {
  readonly applied: readonly number[];
  readonly current: number;
}

export async function migrate(pool: Pool, tableName: string): Promise<MigrationResult> {
  const table = quoteTableName(tableName);
  const versions = quoteTableName(`${tableName}_migrations`);
  const lockKey = `idempotency-proxy:migrate:${tableName}`;
  const client = await pool.connect();
  try {
    await client.query('SELECT pg_advisory_lock(hashtext($1::text))', [lockKey]);
    try {
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
        await applyOne(client, migration, table, tableName, versions);
        applied.push(migration.version);
      }
      return { applied, current: Math.max(0, ...done, ...applied) };
    } finally {
      await client.query('SELECT pg_advisory_unlock(hashtext($1::text))', [lockKey]);
    }
  } finally {
    client.release();
  }
}

/** The newest schema version this build knows. */
export const LATEST_VERSION = Math.max(...MIGRATIONS.map((m) => m.version));

async function appliedVersions(client: PoolClient, versions: string): Promise<Set<number>> {
  const { rows } = await client.query<{ version: number }>(`SELECT version FROM ${versions}`);
  return new Set(rows.map((row) => row.version));
}

async function applyOne(
  client: PoolClient,
  migration: Migration,
  table: string,
  tableName: string,
  versions: string,
): Promise<void> {
  await client.query('BEGIN');
  try {
    await client.query(migration.sql(table, tableName));
    await client.query(`INSERT INTO ${versions} (version, name) VALUES ($1::int, $2::text)`, [
      migration.version,
      migration.name,
    ]);
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK');
    throw error;
  }
}
