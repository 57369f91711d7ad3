// The KeyStore contract (support/key-store-contract.ts) for PostgresKeyStore on the suite's
// PostgreSQL, alone and under the caching decorator, on a table of this file's own; and on Citus
// when CITUS_URL names a coordinator.
import type { Pool } from 'pg';
import { migrate } from '../../src/db/migrate';
import { createPool } from '../../src/db/pool';
import { PostgresKeyStore } from '../../src/store/postgres/key-store';
import {
  coalescingSubject,
  describeKeyStoreContract,
  postgresSubject,
} from '../support/key-store-contract';
import { detectTopology } from '../../src/db/topology';
import { databaseUrl, uniqueTable } from '../support/proxy';
import { describeUnless } from '../support/run-report';

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
  return coalescingSubject(postgresSubject(new PostgresKeyStore(pool, table), pool, table));
});

const citusUrl = process.env.CITUS_URL;
const citus = database(() => citusUrl!);
describeUnless(
  !citusUrl &&
    'CITUS_URL is not set (a Citus coordinator with workers; see docs/store-topologies.md)',
  'key-store-contract.test.ts: the contract did not run on Citus',
)('on Citus', () => {
  describeKeyStoreContract('PostgresKeyStore on a distributed table', async () => {
    const { pool, table } = await citus();
    const topology = await detectTopology(pool, table);
    if (topology.kind !== 'citus' || !topology.distributed)
      throw new Error(`CITUS_URL's table ${table} is not distributed: ${JSON.stringify(topology)}`);
    return postgresSubject(new PostgresKeyStore(pool, table, { distributed: true }), pool, table);
  });
});
