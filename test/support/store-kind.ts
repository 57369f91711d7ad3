// Which kind of PostgreSQL the suite's store is. The whole suite runs on Citus too
// (`DATABASE_URL=$CITUS_URL npm test`); a few tests are about plain PostgreSQL by nature (how one
// table batches, HOT updates on one server) and are skipped there, saying why.

/** Set by the global setup when DATABASE_URL has the citus extension. */
export const CITUS_STORE_ENV = 'TEST_STORE_IS_CITUS';

/** True when the suite runs on a Citus coordinator. */
export function storeIsCitus(): boolean {
  return process.env[CITUS_STORE_ENV] === '1';
}

/**
 * For describeUnless / testUnless: why a test of plain PostgreSQL does not run here, or undefined
 * when the store is plain PostgreSQL.
 */
export function plainPostgresOnly(why: string): string | undefined {
  return storeIsCitus() ? `plain PostgreSQL only (${why}); this run's store is Citus` : undefined;
}
