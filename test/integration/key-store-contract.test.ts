// The KeyStore contract (support/key-store-contract.ts) for PostgresKeyStore on the suite's
// PostgreSQL, alone and under the caching decorator, on a table of this file's own; and on Citus
// when CITUS_URL names a coordinator.
import type { Pool } from 'pg';
import { migrate } from '../../src/db/migrate';
import { createPool } from '../../src/db/pool';
import { PostgresKeyStore } from '../../src/store/postgres/key-store';
import {
  cachingSubject,
  describeKeyStoreContract,
  postgresSubject,
} from '../support/key-store-contract';
import { databaseUrl, uniqueTable } from '../support/proxy';

/** One pool and one migrated table per database, made on first use and shared by its tests. */
function database(url: () => string): () => Promise<{ pool: Pool; table: string }> {
  let made: Promise<{ pool: Pool; table: string }> | undefined;
  afterAll(async () => (await made)?.pool.end());
  return () =>
    (made ??= (async () => {
      const pool = createPool({ url: url(), size: 8, onError: () => undefined });
      const table = uniqueTable('contract');
      await migrate(pool, table);
      return { pool, table };
    })());
}

const postgres = database(databaseUrl);
describeKeyStoreContract('PostgresKeyStore', async () => {
  const { pool, table } = await postgres();
  return postgresSubject(new PostgresKeyStore(pool, table), pool, table);
});
describeKeyStoreContract('the caching decorator over PostgresKeyStore', async () => {
  const { pool, table } = await postgres();
  return cachingSubject(postgresSubject(new PostgresKeyStore(pool, table), pool, table));
});
