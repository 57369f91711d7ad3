// One place that maps transport failures to what the client sees (SPEC §4, §7). What matters for
// idempotency is whether the upstream may have acted: a failure before the request left us is safe to
// retry; anything after it is an unknown outcome.
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
  'ERR_TLS_CERT_ALTNAME_INVALID',
  'CERT_HAS_EXPIRED',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
]);

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
