// The answers the proxy itself gives on a protected route (replay, 409, 422, problems), and the
// store-call wrapper that turns a store failure into 503 (fail closed).
import { performance } from 'node:perf_hooks';
import { isPoolExhausted } from '../db/store-failure';
import { ProxyError } from '../errors';
import { problemBody, problemHeaders, sendProblem } from '../http/problem';
import type { Outcome } from '../http/request-log';
import { writeWhole } from '../http/response';
import { DERIVED_KEY_HEADER } from './derived-key';
import {
  JSON_HEADERS,
  jsonRpcError,
  storedUnknownOutcome,
  withId,
  writeJsonRpcError,
} from '../mcp/jsonrpc';
import { type HeaderPairs, type StoredResponse } from './record';
import {
  BODY_OMITTED_HEADER,
  OUTCOME_HEADER,
  type ProtectedDeps,
  type ProtectedRequest,
} from './protected-context';

const STORE_RETRY_AFTER_SECONDS = 1;

export function replay(request: ProtectedRequest, stored: StoredResponse): void {
  const { res, policy, log } = request;
  log.outcome = 'replayed';
  const extra: [string, string][] = [[policy.replayedHeader, 'true']];
  if (log.keyDerived) extra.push([DERIVED_KEY_HEADER, 'true']);
  if (stored.bodyOmitted) extra.push([BODY_OMITTED_HEADER, 'true']);
  // A tool call's retry has a JSON-RPC id of its own: the stored message is answered under it.
  if (request.mcp) return writeStoredMessage(request, stored, extra);
  writeWhole(
    res,
    stored.status,
    replayHeaders(stored, policy.dropReplayHeaders),
    stored.body,
    extra,
  );
}

/**
 * The stored headers a later caller gets: never the stored Date (Node sends the current one: a
 * replay is a new message), never one the route drops (dropReplayHeaders: another caller's
 * challenge or nonce). Usually neither is there, and the stored array is used as is.
 */
function replayHeaders(stored: StoredResponse, dropped: ReadonlySet<string>): HeaderPairs {
  const headers = stored.headers;
  for (const [name] of headers) {
    if (name === 'date' || dropped.has(name))
      return headers.filter(([other]) => other !== 'date' && !dropped.has(other));
  }
  return headers;
}

export function reused(request: ProtectedRequest, key: string): void {
  fail(
    request,
    'mismatch',
    new ProxyError(
      'IDEMPOTENCY_KEY_REUSED',
      request.mcp
        ? 'This key was already used for a call with another tool or other arguments. Use a new key for a new call, or resend the original call unchanged to get its stored result.'
        : 'This key was already used with a different request (method, path, query or body). Use a new key for a new request, or resend the original request unchanged to get its stored response.',
      { route: request.route.name, key },
    ),
  );
}

export function inFlight(request: ProtectedRequest, key: string, leaseRemainingMs: number): void {
  const seconds = Math.max(1, Math.ceil(leaseRemainingMs / 1000));
  fail(
    request,
    'in_flight',
    new ProxyError(
      'IDEMPOTENCY_KEY_IN_FLIGHT',
      `A request with this key is still being processed. Retry after ${seconds} s with the same key to get its result.`,
      { route: request.route.name, key, retryAfterSeconds: seconds },
    ),
  );
}

export function fail(request: ProtectedRequest, outcome: Outcome, error: ProxyError): void {
  request.log.outcome = outcome;
  sendError(request, error);
}

/** One of the proxy's own errors: problem+json, or a JSON-RPC error on an MCP route. */
export function sendError(request: ProtectedRequest, error: ProxyError): void {
  if (request.mcp) writeJsonRpcError(request.res, request.mcp.idText, jsonRpcError(error));
  else sendProblem(request.res, error);
}

/**
 * The first caller's copy of an unknown-outcome answer it made itself; later callers get it as a
 * replay.
 */
export function sendUnknownOutcome(request: ProtectedRequest, unknown: StoredResponse): void {
  if (request.mcp) return writeStoredMessage(request, unknown, []);
  writeWhole(request.res, unknown.status, unknown.headers, unknown.body);
}

function writeStoredMessage(
  request: ProtectedRequest,
  stored: StoredResponse,
  extra: HeaderPairs,
): void {
  const headers = stored.outcomeUnknown
    ? [...JSON_HEADERS, [OUTCOME_HEADER, 'unknown'] as const]
    : JSON_HEADERS;
  writeWhole(request.res, 200, headers, withId(stored.body, request.mcp!.idText), extra);
}

/**
 * Runs a store operation; on failure answers 503 (unless told not to, or in shadow mode) and returns
 * undefined.
 */
export async function storeCall<T>(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  operation: string,
  call: () => Promise<T>,
  answerOnFailure = true,
): Promise<T | undefined> {
  const started = performance.now();
  let failure: unknown;
  try {
    return await call();
  } catch (error) {
    failure = error;
    deps.onStoreError(error, operation);
    // Shadow mode never answers for the upstream: its caller forwards the request anyway.
    if (answerOnFailure && request.policy.enforce) {
      fail(request, 'store_unavailable', storeUnavailableError(request, error));
    }
    return undefined;
  } finally {
    const ms = performance.now() - started;
    request.log.storeMs += ms;
    deps.observer?.storeCall(operation, ms, failure);
  }
}

/**
 * 503 for a protected request the store could not serve: STORE_BUSY when this instance ran out of
 * pool connections (PostgreSQL itself is fine: other instances and a retry soon may get through),
 * STORE_UNAVAILABLE when PostgreSQL could not be reached. Nothing was forwarded either way.
 */
export function storeUnavailableError(request: ProtectedRequest, cause: unknown): ProxyError {
  const options = {
    route: request.route.name,
    key: request.log.key,
    retryAfterSeconds: STORE_RETRY_AFTER_SECONDS,
    cause,
  };
  if (isPoolExhausted(cause))
    return new ProxyError(
      'STORE_BUSY',
      'All of this proxy instance’s connections to the idempotency store are busy, so the request was not forwarded. Retry shortly with the same key.',
      options,
    );
  return new ProxyError(
    'STORE_UNAVAILABLE',
    'The idempotency store (PostgreSQL) cannot be reached, so the request was not forwarded. Retry later with the same key.',
    options,
  );
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
