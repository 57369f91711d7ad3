// The pg pool, and how every connection to the store is made (the pool, the completion listener,
// `check`): one function, so all of them speak TLS the same way (tls-problem.ts says what a
// refusal means). Connection failures surface as query errors (mapped to 503 by the caller), never
// as a crash: an idle client that dies emits 'error' on the pool, which must be handled.
import type { ConnectionOptions } from 'node:tls';
import { Pool } from 'pg';
import type { StoreTlsConfig } from '../config/types';
import { URL_TLS_PARAMETERS } from '../config/tls-files';

export interface PoolOptions {
  url: string;
  /** store.tls (or the URL's sslmode, already read into it); undefined: plain. */
  tls?: StoreTlsConfig | undefined;
  size: number;
  onError: (error: Error) => void;
  applicationName?: string;
  /** false: synchronous_commit=off for this pool's sessions (see README, Performance). */
  synchronousCommit?: boolean;
}

/** What a pg Client or Pool needs to reach the store: the URL and its TLS. */
export interface StoreConnection {
  readonly connectionString: string;
  /** false: plain. Never absent, so pg's reading of PGSSLMODE never decides. */
  readonly ssl: ConnectionOptions | false;
}

/**
 * The URL without its TLS parameters, and the TLS options they (or store.tls) were compiled to.
 * pg-connection-string would read those parameters its own way (sslmode=require as verify-full,
 * sslrootcert read at every connect) and its reading would override ours, so they never reach it.
 * Without store.tls and sslmode the connection is plain: PGSSLMODE is not read (it would be read
 * pg's way, not libpq's), so what `check` shows is what runs.
 *
 *   require      encrypted; the server's certificate is not checked
 *   verify-ca    its certificate must chain to ca (or the system's CAs); any host name
 *   verify-full  and it must name the host of the URL
 */
export function storeConnection(url: string, tls: StoreTlsConfig | undefined): StoreConnection {
  return { connectionString: withoutTlsParameters(url), ssl: tls ? sslOptions(tls) : false };
}

function sslOptions(tls: StoreTlsConfig): ConnectionOptions {
  const files: ConnectionOptions = {
    ...(tls.ca ? { ca: tls.ca.pem } : {}),
    ...(tls.cert && tls.key ? { cert: tls.cert.pem, key: tls.key.pem } : {}),
  };
  switch (tls.mode) {
    case 'require':
      return { ...files, rejectUnauthorized: false };
    case 'verify-ca':
      return { ...files, rejectUnauthorized: true, checkServerIdentity: () => undefined };
    case 'verify-full':
      return { ...files, rejectUnauthorized: true };
  }
}

function withoutTlsParameters(url: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return url; // not a URL (a keyword/value string): pg reads it as it is
  }
  if (!URL_TLS_PARAMETERS.some((name) => parsed.searchParams.has(name))) return url;
  for (const name of URL_TLS_PARAMETERS) parsed.searchParams.delete(name);
  return parsed.toString();
}

export function createPool(options: PoolOptions): Pool {
  const pool = new Pool({
    ...storeConnection(options.url, options.tls),
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
