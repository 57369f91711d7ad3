// One place that maps transport failures to what the client sees
// (README.md#what-a-client-sees-on-a-protected-route, docs/README.md#small-rules). What matters for
// idempotency is whether the upstream may have acted: a failure before the request left us is safe
// to retry; anything after it is an unknown outcome.
import { ProxyError } from '../errors';

export type TransportFailure =
  /** Nothing reached the upstream: the claim can be dropped and a retry executes. */
  | { readonly sent: false; readonly error: ProxyError }
  /** The request may have run: timed out or dropped after it was sent. */
  | { readonly sent: true; readonly error: ProxyError };

const NOT_SENT_CODES = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EADDRNOTAVAIL',
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_CONNECT',
]);

const UNKNOWN_CA =
  "its certificate is not from a CA the proxy trusts: set the upstream's tls.ca to the CA that issued it";

/**
 * Why a TLS handshake failed, in words an operator can act on. Every one of these is a handshake
 * failure, so the upstream never read a request — including an mTLS refusal, which TLS 1.3 reports
 * only after the client thinks it is connected: the server refused the handshake, not the request.
 */
const TLS_REASONS: Readonly<Record<string, string>> = {
  ERR_TLS_CERT_ALTNAME_INVALID:
    "hostname mismatch: its certificate does not name the host the proxy connects to; set the upstream's tls.servername to a name it holds, or reissue it",
  CERT_HAS_EXPIRED: 'its certificate has expired: renew it on the upstream',
  CERT_NOT_YET_VALID: 'its certificate is not valid yet: check its notBefore and both clocks',
  DEPTH_ZERO_SELF_SIGNED_CERT: UNKNOWN_CA,
  SELF_SIGNED_CERT_IN_CHAIN: UNKNOWN_CA,
  UNABLE_TO_VERIFY_LEAF_SIGNATURE: UNKNOWN_CA,
  UNABLE_TO_GET_ISSUER_CERT: UNKNOWN_CA,
  UNABLE_TO_GET_ISSUER_CERT_LOCALLY: UNKNOWN_CA,
  CERT_UNTRUSTED: UNKNOWN_CA,
  CERT_SIGNATURE_FAILURE: 'its certificate signature does not verify',
  CERT_REVOKED: 'its certificate is revoked',
  ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED:
    "client certificate required: the upstream wants one (mTLS); set the upstream's tls.cert and tls.key",
  ERR_SSL_SSLV3_ALERT_HANDSHAKE_FAILURE:
    "the upstream refused the handshake (a client certificate it wants, or no common cipher): check the upstream's tls.cert and tls.key",
  ERR_SSL_SSLV3_ALERT_BAD_CERTIFICATE:
    "the upstream refused the proxy's client certificate: use one its CA issued (tls.cert, tls.key)",
  ERR_SSL_TLSV1_ALERT_UNKNOWN_CA:
    "the upstream does not trust the CA of the proxy's client certificate: use one its CA issued (tls.cert, tls.key)",
  ERR_SSL_WRONG_VERSION_NUMBER:
    'the upstream does not speak TLS on that port: use an http:// URL or its TLS port',
  ERR_SSL_PACKET_LENGTH_TOO_LONG:
    'the upstream does not speak TLS on that port: use an http:// URL or its TLS port',
};

/** The reason for a TLS failure code, or undefined when `code` is not one. */
export function tlsFailureReason(code: string): string | undefined {
  const known = TLS_REASONS[code];
  if (known !== undefined) return known;
  if (code.startsWith('ERR_SSL_') || code.startsWith('ERR_TLS_')) return 'the TLS handshake failed';
  return undefined;
}

const TIMEOUT_CODES = new Set([
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
  'ETIMEDOUT',
  'ECONNABORTED',
]);

export function errorCode(error: unknown): string | undefined {
  let current: unknown = error;
  for (let depth = 0; depth < 4 && current && typeof current === 'object'; depth++) {
    const code = (current as { code?: unknown }).code;
    if (typeof code === 'string') return code;
    current = (current as { cause?: unknown }).cause;
  }
  return undefined;
}

export function classifyTransportError(
  error: unknown,
  context: { upstream: string; route: string; key?: string | undefined; timeoutMs: number },
): TransportFailure {
  const code = errorCode(error) ?? 'UNKNOWN';
  const options = { route: context.route, key: context.key, cause: error };
  const tlsReason = tlsFailureReason(code);
  if (tlsReason !== undefined) {
    return {
      sent: false,
      error: new ProxyError(
        'UPSTREAM_TLS_FAILED',
        `TLS to upstream "${context.upstream}" failed (${code}): ${tlsReason}. Nothing was sent, so retrying with the same key is safe.`,
        options,
      ),
    };
  }
  if (NOT_SENT_CODES.has(code)) {
    return {
      sent: false,
      error: new ProxyError(
        'UPSTREAM_UNREACHABLE',
        `Could not connect to upstream "${context.upstream}" (${code}); nothing was sent, so retrying with the same key is safe.`,
        options,
      ),
    };
  }
  if (TIMEOUT_CODES.has(code)) {
    return {
      sent: true,
      error: new ProxyError(
        'UPSTREAM_TIMEOUT',
        `Upstream "${context.upstream}" did not answer within ${context.timeoutMs} ms after the request was sent, so it may have acted.`,
        options,
      ),
    };
  }
  return {
    sent: true,
    error: new ProxyError(
      'UPSTREAM_CONNECTION_LOST',
      `The connection to upstream "${context.upstream}" failed after the request was sent (${code}), so it may have acted.`,
      options,
    ),
  };
}
