// What the proxy answers a protected request with, as a value: the state machine (decide.ts,
// follow-leader.ts, settle.ts) returns one, and respond.ts alone writes it and sets the log's
// outcome. Forwarding is not an answer but a decision (decide.ts); what the upstream says is
// written by the forward itself, as it arrives.
import { ProxyError } from '../errors';
import type { Outcome } from '../http/request-log';
import type { StoredResponse } from '../store/record';
import { problemBody, problemHeaders } from '../http/problem';
import type { HeaderPairs } from '../store/record';
import { storedUnknownOutcome } from '../mcp/jsonrpc';
import { OUTCOME_HEADER, type ProtectedRequest } from './context';
import type { IdempotencyPolicy } from '../config/types';

export type Answer =
  /** The stored response (or stored unknown outcome) of an earlier request with the key. */
  | { readonly kind: 'replay'; readonly stored: StoredResponse }
  /** One of the proxy's own refusals or failures (problem+json, or JSON-RPC on MCP routes). */
  | { readonly kind: 'problem'; readonly outcome: Outcome; readonly error: ProxyError }
  /** The answer this request made itself for an upstream that may have acted (README.md#what-a-client-sees-on-a-protected-route). */
  | { readonly kind: 'unknown-outcome'; readonly stored: StoredResponse }
  /** A waiting request whose client left: nobody to answer. */
  | { readonly kind: 'client-gone' };

export function replayOf(stored: StoredResponse): Answer {
  return { kind: 'replay', stored };
}

export function problem(outcome: Outcome, error: ProxyError): Answer {
  return { kind: 'problem', outcome, error };
}

export const CLIENT_GONE: Answer = { kind: 'client-gone' };

export function inFlight(route: string, key: string, leaseRemainingMs: number): Answer {
  const seconds = Math.max(1, Math.ceil(leaseRemainingMs / 1000));
  return problem(
    'in_flight',
    new ProxyError(
      'IDEMPOTENCY_KEY_IN_FLIGHT',
      `A request with this key is still being processed. Retry after ${seconds} s with the same key to get its result.`,
      { route, key, retryAfterSeconds: seconds },
    ),
  );
}

export function reused(route: string, key: string, toolCall: boolean): Answer {
  return problem(
    'mismatch',
    new ProxyError(
      'IDEMPOTENCY_KEY_REUSED',
      toolCall
        ? 'This key was already used for a call with another tool or other arguments. Use a new key for a new call, or resend the original call unchanged to get its stored result.'
        : 'This key was already used with a different request (method, path, query or body). Use a new key for a new request, or resend the original request unchanged to get its stored response.',
      { route, key },
    ),
  );
}

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
  const next =
    policy.unknownOutcome === 'fail'
      ? ` This answer is stored: every repeat with this key gets it, and nothing is forwarded again. Check the upstream; if the request must run, ${clearHint(policy)}`
      : ' A repeat with the same key after the lease (lockTimeout) forwards it again, with the same key.';
  return new ProxyError(error.code, `${error.message}${next}`, {
    route: error.route,
    key: error.key,
    cause: error.cause,
  });
}

/**
 * The answer for a request that may have run: stored under `fail`, marked either way. A problem on
 * REST routes, a JSON-RPC error (without an id: each caller's is spliced in) for a tool call.
 */
export function unknownOutcomeResponse(
  request: ProtectedRequest,
  error: ProxyError,
): StoredResponse {
  if (request.mcp) return storedUnknownOutcome(error, OUTCOME_HEADER);
  const body = Buffer.from(JSON.stringify(problemBody(error)));
  const headers: HeaderPairs = [
    ...problemHeaders(error, body.length).filter(([name]) => name !== 'content-length'),
    [OUTCOME_HEADER, 'unknown'],
  ];
  return { status: error.status, headers, body, bodyOmitted: false, outcomeUnknown: true };
}
