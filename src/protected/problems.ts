// The proxy's own refusals and failures on a protected route, as ProxyErrors: what each one tells a
// client to do. Each protocol's adapter writes them its own way (REST: problem+json; MCP and A2A:
// their JSON-RPC or HTTP+JSON errors).
import type { IdempotencyPolicy } from '../config/types';
import { ProxyError } from '../errors';

export function inFlight(route: string, key: string, leaseRemainingMs: number): ProxyError {
  const seconds = Math.max(1, Math.ceil(leaseRemainingMs / 1000));
  return new ProxyError(
    'IDEMPOTENCY_KEY_IN_FLIGHT',
    `A request with this key is still being processed. Retry after ${seconds} s with the same key to get its result.`,
    { route, key, retryAfterSeconds: seconds },
  );
}

export function reused(route: string, key: string, detail: string): ProxyError {
  return new ProxyError('IDEMPOTENCY_KEY_REUSED', detail, { route, key });
}

/** The answer stored when a claim's lease ran out before its result was stored (unknownOutcome: fail). */
export function leaseEndedUnknown(
  route: string,
  key: string,
  policy: IdempotencyPolicy,
): ProxyError {
  return new ProxyError(
    'IDEMPOTENCY_OUTCOME_UNKNOWN',
    `The first request with this key was interrupted before its result was stored (the proxy stopped or lost the upstream), so it may have run upstream. ${policy.reconcile ? RECONCILE_HINT : `It will not be forwarded again; check the upstream, then, if it must run, ${clearHint(policy)}`}`,
    { route, key },
  );
}

/** The answer stored for a long call its client cancelled while it ran upstream. */
export function cancelledCall(route: string, key: string): ProxyError {
  return new ProxyError(
    'IDEMPOTENCY_OUTCOME_UNKNOWN',
    'The call was cancelled by its client while it ran upstream, so it may have partly run.',
    { route, key },
  );
}

/** What a client is told on a route that asks its upstream (idempotency.reconcile). */
const RECONCILE_HINT =
  'The proxy asks the upstream whether it ran: retry with the same key after Retry-After to get its real result, or to have it forwarded (once) if it never ran.';

/**
 * How an operator lets a key whose outcome is unknown run again, in commands that exist whatever the
 * config: the CLI (the admin API is off by default) or the admin API.
 */
export function clearHint(policy: Pick<IdempotencyPolicy, 'scope' | 'tenant'>): string {
  const tenants = policy.tenant.map((part) => ` --tenant '<${part}>'`).join('');
  return `have an operator clear the key: idempotency-proxy clear ${policy.scope} KEY${tenants}, or DELETE /api/records on the admin API.`;
}

/**
 * What a client is told after a transport failure once the request was sent: what becomes of the
 * key under the route's `unknownOutcome`.
 */
export function afterUnknownOutcome(error: ProxyError, policy: IdempotencyPolicy): ProxyError {
  const next = policy.reconcile
    ? ` ${RECONCILE_HINT}`
    : policy.unknownOutcome === 'fail'
      ? ` This answer is stored: every repeat with this key gets it, and nothing is forwarded again. Check the upstream; if the request must run, ${clearHint(policy)}`
      : ' A repeat with the same key after the lease (lockTimeout) forwards it again, with the same key.';
  return new ProxyError(error.code, `${error.message}${next}`, {
    route: error.route,
    key: error.key,
    cause: error.cause,
  });
}
