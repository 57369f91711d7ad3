// What a TLS refusal between the proxy and PostgreSQL means and what to change, in one sentence:
// for startup (which stops on it, exit 2: none of these fixes itself), `check`, and the log line of
// a store failure at runtime. Kept free of pg imports, as the request path's logging uses it.
import type { StoreTlsConfig } from '../config/types';

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
      : `${where} presented a certificate that no public CA issued (${code}; with no store.tls.ca only Node's built-in public CAs are trusted): set store.tls.ca (or sslrootcert in the URL) to the CA that issued the server's certificate (a managed PostgreSQL publishes its CA bundle)`;
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
