// What kind of store failure an error is: the pool ran out of connections (node-postgres's own
// wording; PostgreSQL may be fine: STORE_BUSY), PostgreSQL is read-only (a failover under way), or
// it could not be reached or failed.
// Kept free of pg imports so the protected path and the logs can ask without loading a driver.

export type StoreFailureKind = 'pool_busy' | 'read_only' | 'unavailable';

/** pg-pool gave up waiting for a free connection (connectionTimeoutMillis), not for the server. */
export function isPoolExhausted(error: unknown): boolean {
  return error instanceof Error && error.message === 'timeout exceeded when trying to connect';
}

export function storeFailureKind(error: unknown): StoreFailureKind {
  if (isPoolExhausted(error)) return 'pool_busy';
  // SQLSTATE 25006: a standby, or a primary demoted by a failover (the URL's host has not moved yet).
  if ((error as { code?: unknown } | null)?.code === '25006') return 'read_only';
  return 'unavailable';
}
