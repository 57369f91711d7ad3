// The pg pool, and how every connection to the store is made (the pool, the completion listener,
// `check`): one function, so all of them speak TLS the same way. Connection failures surface as
// query errors (mapped to 503 by the caller), never as a crash: an idle client that dies emits
// 'error' on the pool, which must be handled.
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
  /** Absent: pg's own default (plain, or PGSSLMODE from the environment). */
  readonly ssl?: ConnectionOptions | false;
}

/**
 * The URL without its TLS parameters, and the TLS options they (or store.tls) were compiled to.
 * pg-connection-string would read those parameters its own way (sslmode=require as verify-full,
 * sslrootcert read at every connect) and its reading would override ours, so they never reach it.
 *
 *   require      encrypted; the server's certificate is not checked
 *   verify-ca    its certificate must chain to ca (or the system's CAs); any host name
 *   verify-full  and it must name the host of the URL
 */
export function storeConnection(url: string, tls: StoreTlsConfig | undefined): StoreConnection {
  const connectionString = withoutTlsParameters(url);
  if (tls) return { connectionString, ssl: sslOptions(tls) };
  // sslmode=disable was taken out of the URL: say so, or PGSSLMODE would decide instead.
  return connectionString === url ? { connectionString } : { connectionString, ssl: false };
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

const UNTRUSTED = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'CERT_UNTRUSTED',
]);

/**
 * What to do about a connection that failed for TLS reasons, or undefined when it did not. `where`
 * names the server; the answer is one sentence for a person.
 */
export function storeTlsProblem(
  error: unknown,
  tls: StoreTlsConfig | undefined,
  where: string,
): string | undefined {
  const code = (error as { code?: unknown } | undefined)?.code;
  const message = (error as Error | undefined)?.message ?? '';
  if (typeof code === 'string' && UNTRUSTED.has(code)) {
    const ca = tls?.ca ? ` (${tls.ca.file} is not it)` : ' (none set: the system CAs were used)';
    return `${where} presented a certificate not from a CA the proxy trusts (${code}): set store.tls.ca (or sslrootcert in the URL) to the CA that issued the server's certificate${ca}`;
  }
  if (code === 'ERR_TLS_CERT_ALTNAME_INVALID')
    return `${where} presented a certificate for another host name (${message}): connect by a name the certificate holds, or use store.tls.mode verify-ca (chain checked, host name not)`;
  if (code === 'CERT_HAS_EXPIRED')
    return `${where} presented an expired certificate: renew the server's certificate`;
  if (/does not support SSL/i.test(message))
    return `${where} does not accept TLS (ssl = off on the server): turn ssl on there, or remove store.tls (or sslmode) to connect in plain`;
  if (/no encryption/i.test(message))
    return `${where} refused a plain connection (${message.split('\n')[0]}): pg_hba.conf requires TLS (hostssl); set store.tls (mode verify-full and ca) or sslmode=verify-full&sslrootcert=… in the URL`;
  if (/certificate/i.test(message) && /alert|required/i.test(message))
    return `${where} refused the connection's client certificate (${message}): set store.tls.cert and key to a certificate its CA issued`;
  return undefined;
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
