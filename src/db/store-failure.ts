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

export interface DatabaseErrorFields {
  /** SQLSTATE, or Node's (ECONNREFUSED); absent when the error has none. */
  readonly code?: string;
  /** The first line of its message. */
  readonly error: string;
  /** `host:port` of the server it came from, when known. */
  readonly server?: string;
}

/**
 * A database error as log fields. Never the error object itself: pg-pool attaches the whole pg
 * client to it (`err.client`: its connection, its queued queries, their SQL), and pino would write
 * every enumerable field of it, one 8 KB line per failure.
 */
export function databaseErrorFields(error: unknown, server?: string): DatabaseErrorFields {
  const code = (error as { code?: unknown } | null | undefined)?.code;
  const message = error instanceof Error ? error.message : String(error);
  return {
    ...(typeof code === 'string' || typeof code === 'number' ? { code: String(code) } : {}),
    error: message.split('\n')[0]!,
    ...(server !== undefined ? { server } : {}),
  };
}

/** `host:port` of a postgres:// URL (5432 when it names none); undefined for anything else. */
export function serverAddress(url: string): string | undefined {
  try {
    const parsed = new URL(url);
    if (!parsed.hostname) return undefined;
    return `${parsed.hostname}:${parsed.port || '5432'}`;
  } catch {
    return undefined;
  }
}
