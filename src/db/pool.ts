// The pg pool. Connection failures surface as query errors (mapped to 503 by the caller), never as a
// crash: an idle client that dies emits 'error' on the pool, which must be handled.
import { Pool } from 'pg';

export interface PoolOptions {
  url: string;
  size: number;
  onError: (error: Error) => void;
  applicationName?: string;
  /** false: synchronous_commit=off for this pool's sessions (see README, Performance). */
  synchronousCommit?: boolean;
}

export function createPool(options: PoolOptions): Pool {
  const pool = new Pool({
    connectionString: options.url,
    max: options.size,
    // Fail fast when Postgres is away instead of queueing requests behind a dead server.
    connectionTimeoutMillis: 2_000,
    idleTimeoutMillis: 30_000,
    // A claim or completion is a single-row statement; anything this slow means trouble.
    statement_timeout: 10_000,
    query_timeout: 12_000,
    application_name: options.applicationName ?? 'idempotency-proxy',
    keepAlive: true,
    ...(options.synchronousCommit === false ? { options: '-c synchronous_commit=off' } : {}),
  });
  pool.on('error', options.onError);
  return pool;
}
