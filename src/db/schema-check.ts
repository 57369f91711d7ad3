// What `serve` does at start instead of migrating when `store.migrate` is false: the schema was
// migrated by someone else (`idempotency-proxy migrate`, run as a role that may create tables, e.g.
// a Kubernetes Job), and this process's role may only read and write the rows. It checks, before
// anything listens, that the tables are there at this build's version and that the role holds every
// privilege the request path, the pruner and /readyz use, so a missing step stops the start with one
// line that names it instead of answering 503 to every request.
//
// A schema newer than this build is accepted, as /readyz accepts it: migrations only add (columns
// with defaults, indexes), so the replicas an upgrade has not replaced yet keep serving.
import type { Pool } from 'pg';
import { StartupError } from '../startup-error';
import { quoteTableName } from './identifier';
import { LATEST_VERSION } from './migrate';

/** What the serving role needs, per table (docs/operations.md#database-roles). */
export const SERVING_PRIVILEGES = {
  keys: ['SELECT', 'INSERT', 'UPDATE', 'DELETE'],
  versions: ['SELECT'],
} as const;

const MIGRATE_HINT =
  'run `idempotency-proxy migrate` with a role that may create tables (the migration Job), then start the proxy again';

export interface SchemaCheck {
  /** The schema version found (at least LATEST_VERSION). */
  readonly version: number;
}

export async function checkSchema(pool: Pool, tableName: string): Promise<SchemaCheck> {
  const keys = quoteTableName(tableName);
  const versions = quoteTableName(`${tableName}_migrations`);
  const found = await pool.query<{ role: string; keys: boolean; versions: boolean }>(
    `SELECT current_user AS role, to_regclass($1::text) IS NOT NULL AS keys,
            to_regclass($2::text) IS NOT NULL AS versions`,
    [keys, versions],
  );
  const { role, ...present } = found.rows[0]!;
  const skipping = 'store.migrate is false, so serve does not migrate';
  if (!present.keys || !present.versions) {
    throw new StartupError(
      `the store's table ${keys} does not exist in the schemas role "${role}" sees (search_path) (${skipping}): ${MIGRATE_HINT}`,
    );
  }
  const missing = await missingPrivileges(pool, [
    [keys, SERVING_PRIVILEGES.keys],
    [versions, SERVING_PRIVILEGES.versions],
  ]);
  if (missing.length > 0) {
    throw new StartupError(
      `role "${role}" lacks privileges the proxy needs: ${missing.join('; ')}. As the tables' owner: ${grantStatements(tableName, role)}`,
    );
  }
  const { rows } = await pool.query<{ version: number | null }>(
    `SELECT max(version) AS version FROM ${versions}`,
  );
  const version = rows[0]?.version ?? 0;
  if (version < LATEST_VERSION) {
    throw new StartupError(
      `the store's schema is at version ${version} and this build needs ${LATEST_VERSION} (${skipping}): ${MIGRATE_HINT}`,
    );
  }
  return { version };
}

/** `SELECT, UPDATE on "t"` for each table whose listed privileges the current role does not hold. */
async function missingPrivileges(
  pool: Pool,
  wanted: readonly (readonly [string, readonly string[]])[],
): Promise<string[]> {
  // has_table_privilege with a list is true when ANY is held: ask for each one.
  const { rows } = await pool.query<{ table_name: string; missing: string[] }>(
    `SELECT w.table_name, array_agg(w.privilege ORDER BY w.ord) AS missing
       FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS w(table_name, privilege, ord)
      WHERE NOT has_table_privilege(w.table_name, w.privilege)
      GROUP BY w.table_name ORDER BY min(w.ord)`,
    [
      wanted.flatMap(([table, privileges]) => privileges.map(() => table)),
      wanted.flatMap(([, privileges]) => privileges),
    ],
  );
  return rows.map((row) => `${row.missing.join(', ')} on ${row.table_name}`);
}

/** The GRANT statements that give `role` what serving needs, for the message and the docs' test. */
export function grantStatements(tableName: string, role: string): string {
  const keys = quoteTableName(tableName);
  const versions = quoteTableName(`${tableName}_migrations`);
  const grantee = `"${role.replace(/"/g, '""')}"`;
  return [
    `GRANT ${SERVING_PRIVILEGES.keys.join(', ')} ON ${keys} TO ${grantee};`,
    `GRANT ${SERVING_PRIVILEGES.versions.join(', ')} ON ${versions} TO ${grantee};`,
  ].join(' ');
}
