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

const UNTRUSTED = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'CERT_UNTRUSTED',
]);

/** The server's TLS alerts about the certificate the proxy sent (or did not send). */
const CLIENT_CERT_REFUSED =
  /^ERR_SSL_(TLSV1_ALERT_UNKNOWN_CA|SSLV3_ALERT_BAD_CERTIFICATE|SSLV3_ALERT_CERTIFICATE_(UNKNOWN|EXPIRED|REVOKED|UNSUPPORTED)|TLSV1_ALERT_ACCESS_DENIED|TLSV13_ALERT_CERTIFICATE_REQUIRED)$/;

/**
 * What to do about a connection that failed for TLS reasons, or undefined when it did not. `where`
 * names the server; the answer is one sentence for a person. None of these fixes itself, so startup
 * stops on them at once instead of waiting for the server.
 */
export function storeTlsProblem(
  error: unknown,
  tls: StoreTlsConfig | undefined,
  where: string,
): string | undefined {
  const failure = error as
    | { code?: unknown; message?: string; host?: string; cert?: { subjectaltname?: string } }
    | undefined;
  const code = typeof failure?.code === 'string' ? failure.code : undefined;
  const message = (failure?.message ?? '').split('\n')[0]!;
  if (code !== undefined && UNTRUSTED.has(code)) {
    return tls?.ca
      ? `${where} presented a certificate that the CA in ${tls.ca.file} did not issue (${code}): point store.tls.ca (or sslrootcert in the URL) at the CA that issued the server's certificate (a managed PostgreSQL publishes its CA bundle), or fix that file`
      : `${where} presented a certificate from a CA this system does not trust (${code}): set store.tls.ca (or sslrootcert in the URL) to the CA that issued the server's certificate`;
  }
  if (code === 'ERR_TLS_CERT_ALTNAME_INVALID') {
    const names = failure?.cert?.subjectaltname || 'other names';
    return `${where} presented a certificate for ${names}, not for ${failure?.host ?? 'the host in the URL'} (${code}): put a name the certificate holds in the URL's host, or use mode verify-ca (store.tls.mode, or sslmode in the URL) to check the CA and not the host name`;
  }
  if (code === 'CERT_HAS_EXPIRED' || code === 'CERT_NOT_YET_VALID')
    return `${where} presented a certificate outside its validity period (${code}): renew the server's certificate (or check this machine's clock)`;
  if (/does not support SSL/i.test(message))
    return `${where} does not accept TLS (ssl = off on the server): turn ssl on there, or remove store.tls (or sslmode) to connect in plain`;
  if (/no encryption/i.test(message))
    return `${where} requires TLS and refused a plain connection (${message}): its pg_hba.conf has only hostssl lines for this client; set store.tls (mode verify-full and ca) or sslmode=verify-full&sslrootcert=… in the URL`;
  if (/requires a valid client certificate/i.test(message))
    return `${where} requires a client certificate (${message}): set store.tls.cert and store.tls.key (or sslcert and sslkey in the URL) to a certificate issued by the CA in the server's ssl_ca_file`;
  const sent = tls?.cert ? ` ${tls.cert.file}` : '';
  if (code !== undefined && CLIENT_CERT_REFUSED.test(code))
    return `${where} refused the client certificate${sent} (${code}): use a certificate issued by the CA in the server's ssl_ca_file`;
  if (tls?.cert && code === '28000' && /authentication failed for user/i.test(message))
    return `${where} did not accept the client certificate${sent} for this user (${message}): with clientcert=verify-full its CN must be the user name in the URL (or mapped to it in pg_ident.conf)`;
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
