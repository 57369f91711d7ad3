// What kind of store failure an error is, from node-postgres's own wording: the pool ran out of
// connections (PostgreSQL may be fine: STORE_BUSY), or PostgreSQL could not be reached or failed.
// Kept free of pg imports so the protected path and the logs can ask without loading a driver.

export type StoreFailureKind = 'pool_busy' | 'unavailable';

/** pg-pool gave up waiting for a free connection (connectionTimeoutMillis), not for the server. */
export function isPoolExhausted(error: unknown): boolean {
  return error instanceof Error && error.message === 'timeout exceeded when trying to connect';
}

export function storeFailureKind(error: unknown): StoreFailureKind {
  return isPoolExhausted(error) ? 'pool_busy' : 'unavailable';
}
