// The protected-request state machine, top to bottom (SPEC §4):
//
//   key ─┬─ sent ─────────────┐
//        └─ none, derive set ─┤ (derived-key.ts: hashed from the request once its body is read)
//                             ▼
//   body → fingerprint → claim ─┬─ claimed ──► forward ─┬─ stored status ──► complete → respond
//                               │                       ├─ released status ► release  → respond
//                               │                       ├─ nothing sent ───► release  → 502
//                               │                       └─ maybe ran ──────► fail: store unknown outcome
//                               │                                            retry: keep claim (lease)
//                               ├─ completed ─► replay
//                               ├─ mismatch ──► 422 (record untouched)
//                               └─ in flight ─┬─ lease left ─► 409 + Retry-After
//                                             └─ lease over ─► fail: settle as unknown, replay
//                                                              retry: take over (fence + 1), forward
//
// Shadow mode (enforce: false, shadow.ts) leaves this path wherever enforcement would answer for the
// upstream (400, 413, 503, replay, 409, 422): it forwards anyway and only logs what it would have done.
//
// The response is stored before the client sees its last byte, so once a client has a whole answer,
// every retry replays it.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { performance } from 'node:perf_hooks';
import type { IdempotencyPolicy, RouteConfig } from '../config/types';
import { ProxyError } from '../errors';
import { BodyTooLargeError, readBody } from '../http/body';
import { problemBody, problemHeaders, sendProblem } from '../http/problem';
import type { Outcome, RequestLogEntry } from '../http/request-log';
import { responseHeaderPairs, writeWhole } from '../http/response';
import { type RequestTarget, upstreamPath } from '../http/router';
import type { PassThrough } from '../upstream/passthrough';
import type { UpstreamPools, UpstreamResponse } from '../upstream/protected';
import type { TransportFailure } from '../upstream/transport-errors';
import { DERIVED_KEY_HEADER, deriveKey, derivedKeyPolicy } from './derived-key';
import { computeFingerprint, type FingerprintInput } from './fingerprint';
import { outgoingHeaders, startStreaming, transportFailure, writeChunk } from './forwarding';
import { type KeyParseResult, parseIdempotencyKey } from './key';
import {
  type CompletionWaiter,
  type HeaderPairs,
  type KeyStore,
  type RecordId,
  recordDigest,
  type StoredResponse,
} from './record';
import type { ReplayCache } from './replay-cache';
import { forwardUnstored, passThroughInShadow, readBodyOrRewind, shadowVerdict } from './shadow';
import { tenantHash } from './tenant';

export interface ProtectedDeps {
  readonly store: KeyStore;
  readonly upstreams: UpstreamPools;
  readonly passThrough: PassThrough;
  readonly onStoreError: (error: unknown, operation: string) => void;
  /** Wakes onConcurrent: wait requests; without one they poll. */
  readonly waiter?: CompletionWaiter;
  /** Metrics hooks (observability/metrics.ts); the state machine itself knows no metrics library. */
  readonly observer?: ProtectedObserver;
  /** Completed records kept in memory, so replays need no round trip (replay-cache.ts). */
  readonly cache?: ReplayCache;
}

export interface ProtectedObserver {
  /** One store round trip (or a wait, operation 'wait'), with its error if it failed. */
  storeCall(operation: string, ms: number, error: unknown): void;
  /** +1 when this instance starts forwarding under a claim, -1 when it has stored or released it. */
  claimsHeld(delta: 1 | -1): void;
}

export interface ProtectedRequest {
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  readonly route: RouteConfig;
  readonly policy: IdempotencyPolicy;
  readonly target: RequestTarget;
  readonly log: RequestLogEntry;
}

export const OUTCOME_HEADER = 'idempotency-outcome';
export const BODY_OMITTED_HEADER = 'idempotent-body-omitted';
const STORE_RETRY_AFTER_SECONDS = 1;
/** Rounds of claim → (take over | settle) before giving up with a 409; only races need more than one. */
const MAX_CLAIM_ROUNDS = 3;
/** How often a waiting request looks at its record when no notification comes. */
const WAIT_POLL_MS = 500;

export async function handleProtectedRequest(
  deps: ProtectedDeps,
  request: ProtectedRequest,
): Promise<void> {
  const { req, res, route, policy, log } = request;

  const parsed = parseIdempotencyKey(req.headersDistinct[policy.key.header], policy.key.maxLength);
  // No key header on a route with key.derive: the key is derived once the body is read. A key that
  // was sent but is invalid is never replaced by a derived one: that would hide a client bug.
  const derivesKey = !parsed.ok && parsed.problem === 'missing' && policy.key.derive !== null;
  if (!parsed.ok && !derivesKey) return refuseKey(deps, request, parsed);
  if (parsed.ok) log.key = parsed.key;

  let body: Buffer;
  try {
    body = policy.enforce
      ? await readBody(req, policy.maxRequestBytes)
      : await readBodyOrRewind(req, policy.maxRequestBytes);
  } catch (error) {
    if (!(error instanceof BodyTooLargeError)) {
      // The client went away mid-body: nothing was claimed, nobody to answer.
      log.outcome = 'error';
      res.destroy();
      return;
    }
    if (!policy.enforce) return passThroughInShadow(deps, request, 'would_reject_too_large');
    // The unread rest of the body would be parsed as the next request: close the connection.
    res.shouldKeepAlive = false;
    return fail(
      request,
      'too_large',
      new ProxyError(
        'REQUEST_TOO_LARGE',
        `The request body is larger than this route's limit of ${policy.maxRequestBytes} bytes (maxRequestBytes); send a smaller body.`,
        { route: route.name, key: log.key },
      ),
    );
  }

  const input: FingerprintInput = {
    method: req.method ?? 'POST',
    path: request.target.path,
    query: request.target.query,
    headers: req.headers,
    body,
    contentType: req.headers['content-type'],
  };
  if (parsed.ok) return claimAndAnswer(deps, request, parsed.key, input);
  // Only a route with key.derive gets here (refuseKey took every other keyless request). A derived
  // key's record lives for key.window instead of ttl; the rest is as for a sent key.
  const key = deriveKey(policy.key.derive!, input, policy.fingerprint.ignore);
  log.key = key;
  log.keyDerived = true;
  return claimAndAnswer(deps, { ...request, policy: derivedKeyPolicy(policy) }, key, input);
}

/**
 * No usable key and none to derive: forwarded unprotected when no key is required, else 400 (in
 * shadow mode: forwarded anyway).
 */
function refuseKey(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  parsed: Extract<KeyParseResult, { ok: false }>,
): void {
  const { route, policy, log } = request;
  const missing = parsed.problem === 'missing';
  if (missing && !policy.key.required) {
    // No key and none required: forwarded unprotected, streamed like any pass-through request.
    log.outcome = 'passthrough';
    deps.passThrough.web(request.req, request.res, route, upstreamPath(route, request.target));
    return;
  }
  if (!policy.enforce) {
    return passThroughInShadow(
      deps,
      request,
      missing ? 'would_reject_missing_key' : 'would_reject_invalid_key',
    );
  }
  fail(
    request,
    missing ? 'missing_key' : 'invalid_key',
    new ProxyError(missing ? 'IDEMPOTENCY_KEY_MISSING' : 'IDEMPOTENCY_KEY_INVALID', parsed.detail, {
      route: route.name,
    }),
  );
}

/** Claims (scope, key) and answers: forward, replay, 409 or 422 (SPEC §4). */
async function claimAndAnswer(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  key: string,
  input: FingerprintInput,
): Promise<void> {
  const { req, route, policy, log } = request;
  const body = input.body;
  const id: RecordId = { scope: policy.scope, tenant: tenantHash(req.headers, policy.tenant), key };
  const fingerprint = computeFingerprint(input, policy.fingerprint);
  const digest = recordDigest(id);
  if (policy.enforce) {
    const cached = deps.cache?.lookup(digest, id, fingerprint);
    if (cached) {
      log.cached = true;
      return cached.kind === 'replay' ? replay(request, cached.response) : reused(request, key);
    }
  }

  // Only wait once per request: `waitDeadline` is fixed when the first wait starts.
  let waitDeadline: number | undefined;
  for (let round = 0; round < MAX_CLAIM_ROUNDS; round++) {
    const claim = await storeCall(deps, request, 'claim', () =>
      deps.store.claim({
        id,
        route: route.name,
        fingerprint,
        leaseMs: policy.lockTimeoutMs,
        claimExpiryMs: Math.max(policy.ttlMs, policy.lockTimeoutMs),
      }),
    );
    if (claim === undefined) return storeUnavailable(deps, request, key, body);
    log.attempts = claim.attempts;

    const wouldHave = policy.enforce ? undefined : shadowVerdict(claim, policy);
    if (wouldHave !== undefined)
      return forwardUnstored(deps.upstreams, request, key, body, wouldHave);

    switch (claim.kind) {
      case 'claimed':
        return forward(deps, request, id, claim.fence, body, fingerprint);
      case 'completed':
        deps.cache?.remember(digest, fingerprint, claim.response, claim.expiresInMs);
        return replay(request, claim.response);
      case 'mismatch':
        return reused(request, key);
      case 'in-flight': {
        if (claim.leaseRemainingMs > 0) {
          if (policy.onConcurrent !== 'wait') return inFlight(request, key, claim.leaseRemainingMs);
          waitDeadline ??= performance.now() + policy.waitTimeoutMs;
          const waitStarted = performance.now();
          const waited = await storeCall(deps, request, 'wait', () =>
            waitForChange(deps, request, id, fingerprint, waitDeadline!),
          );
          // The wait is not store time: the two peeks in it are small next to the pause.
          log.waitMs += performance.now() - waitStarted;
          log.storeMs -= performance.now() - waitStarted;
          if (waited === undefined) return;
          if (waited.kind === 'client-gone') {
            log.outcome = 'client_gone';
            return;
          }
          if (waited.kind === 'timeout') return inFlight(request, key, waited.leaseRemainingMs);
          round--; // a change is progress, not a lost race: read the record again
          break;
        }
        if (policy.unknownOutcome === 'retry') {
          const fence = await storeCall(deps, request, 'take over', () =>
            deps.store.takeOver(id, claim.fence, policy.lockTimeoutMs),
          );
          if (fence === undefined) return storeUnavailable(deps, request, key, body);
          if (fence !== null) return forward(deps, request, id, fence, body, fingerprint);
        } else {
          const unknown = unknownOutcomeResponse(
            new ProxyError(
              'IDEMPOTENCY_OUTCOME_UNKNOWN',
              'The first request with this key was interrupted before its result was stored (the proxy stopped or lost the upstream), so it may have run upstream. It will not be forwarded again; check the upstream, then ask an operator to clear the key if it must run.',
              { route: route.name, key },
            ),
          );
          const settled = await storeCall(deps, request, 'settle unknown', () =>
            deps.store.settleUnknown(id, claim.fence, unknown, policy.ttlMs),
          );
          if (settled === undefined) return;
          if (settled !== null) {
            log.outcomeUnknown = true;
            return replay(request, settled);
          }
        }
        break; // someone else moved the record on: read it again
      }
    }
  }
  if (!policy.enforce)
    return forwardUnstored(deps.upstreams, request, key, body, 'would_reject_in_flight');
  return inFlight(request, key, 1_000);
}

/**
 * The store failed before this request could claim: enforcing, storeCall has answered 503 and
 * nothing is forwarded (fail closed); in shadow mode the request is forwarded anyway.
 */
function storeUnavailable(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  key: string,
  body: Buffer,
): Promise<void> | undefined {
  if (request.policy.enforce) return undefined;
  return forwardUnstored(deps.upstreams, request, key, body, 'would_reject_store_unavailable');
}

type WaitResult =
  | { readonly kind: 'changed' }
  | { readonly kind: 'timeout'; readonly leaseRemainingMs: number }
  | { readonly kind: 'client-gone' };

/**
 * onConcurrent: wait. Blocks until the in-flight record completes, is released, or its lease ends
 * (then the claim loop replays, executes or takes over), woken by NOTIFY with polling as the backstop.
 * Holds no database connection while waiting, and stops as soon as the client hangs up.
 */
async function waitForChange(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  id: RecordId,
  fingerprint: Buffer,
  deadline: number,
): Promise<WaitResult> {
  const digest = recordDigest(id);
  const gone = clientGone(request.res);
  for (;;) {
    const subscription = deps.waiter?.waitFor(digest);
    let timer: NodeJS.Timeout | undefined;
    try {
      // Look after subscribing, so a completion between the claim and now is not missed.
      const seen = await deps.store.peek(id, fingerprint);
      if (seen.kind !== 'in-flight' || seen.leaseRemainingMs === 0) return { kind: 'changed' };
      const left = deadline - performance.now();
      if (left <= 0) return { kind: 'timeout', leaseRemainingMs: seen.leaseRemainingMs };
      const pause = new Promise<'poll'>((resolve) => {
        timer = setTimeout(
          () => resolve('poll'),
          Math.min(left, WAIT_POLL_MS, seen.leaseRemainingMs),
        );
      });
      const woke = await Promise.race([pause, gone, subscription?.changed ?? pause]);
      if (woke === 'gone') return { kind: 'client-gone' };
    } finally {
      clearTimeout(timer);
      subscription?.cancel();
    }
  }
}

function clientGone(res: ServerResponse): Promise<'gone'> {
  if (res.destroyed) return Promise.resolve('gone');
  return new Promise((resolve) => res.once('close', () => resolve('gone')));
}

async function forward(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  id: RecordId,
  fence: string,
  body: Buffer,
  fingerprint: Buffer,
): Promise<void> {
  deps.observer?.claimsHeld(1);
  try {
    await forwardAndSettle(deps, request, id, fence, body, fingerprint);
  } finally {
    deps.observer?.claimsHeld(-1);
  }
}

async function forwardAndSettle(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  id: RecordId,
  fence: string,
  body: Buffer,
  fingerprint: Buffer,
): Promise<void> {
  const { req, res, route, policy, log } = request;
  const started = performance.now();
  let response: UpstreamResponse;
  try {
    response = await deps.upstreams.request(route.upstream, {
      method: req.method ?? 'POST',
      path: upstreamPath(route, request.target),
      headers: outgoingHeaders(req, policy, id.key),
      body,
    });
  } catch (error) {
    log.upstreamMs += performance.now() - started;
    return settleFailure(deps, request, id, fence, transportFailure(request.route, error, id.key));
  }

  const status = response.status;
  const clientHeaders = responseHeaderPairs(response.headers, { keepSetCookie: true });
  let chunks: Buffer[] = [];
  let total = 0;
  let streaming = false;
  try {
    for await (const chunk of response.body as AsyncIterable<Buffer>) {
      total += chunk.length;
      if (!streaming && total > policy.maxResponseBytes) {
        // Too big to store: deliver it in full as it arrives; replays get status and headers only.
        streaming = true;
        startStreaming(res, status, clientHeaders, response.headers['content-length']);
        for (const buffered of chunks) res.write(buffered);
        chunks = [];
      }
      if (streaming) await writeChunk(res, chunk);
      else chunks.push(chunk);
    }
  } catch (error) {
    log.upstreamMs += performance.now() - started;
    const failure = transportFailure(request.route, error, id.key);
    if (streaming) res.destroy(); // the client already has a head and part of a body
    return settleFailure(deps, request, id, fence, { sent: true, error: failure.error }, streaming);
  }
  log.upstreamMs += performance.now() - started;
  log.outcome = 'executed';

  const bodyBuffer = streaming ? Buffer.alloc(0) : Buffer.concat(chunks, total);
  if (!policy.storesStatus(status)) {
    // The upstream did not act (or the route does not keep this status): let a retry execute again.
    await storeCall(deps, request, 'release', () => deps.store.release(id, fence), false);
  } else {
    const stored: StoredResponse = {
      status,
      headers: policy.replaySetCookie
        ? clientHeaders
        : clientHeaders.filter(([name]) => name !== 'set-cookie'),
      body: bodyBuffer,
      bodyOmitted: streaming,
      outcomeUnknown: false,
    };
    // If this fails the upstream has still acted: the client gets its answer, and the claim stays in
    // progress until its lease ends (then unknownOutcome decides).
    const completed = await storeCall(
      deps,
      request,
      'complete',
      () => deps.store.complete(id, fence, stored, policy.ttlMs),
      false,
    );
    if (completed) deps.cache?.remember(recordDigest(id), fingerprint, stored, policy.ttlMs);
  }
  if (streaming) res.end();
  else writeWhole(res, status, clientHeaders, bodyBuffer);
}

/** After a transport failure: release if nothing was sent; else store or keep the unknown outcome. */
async function settleFailure(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  id: RecordId,
  fence: string,
  failure: TransportFailure,
  clientAlreadyAnswered = false,
): Promise<void> {
  const { policy } = request;
  request.log.outcome = 'upstream_error';
  if (!failure.sent) {
    await storeCall(deps, request, 'release', () => deps.store.release(id, fence), false);
    if (!clientAlreadyAnswered) sendProblem(request.res, failure.error);
    return;
  }
  const unknown = unknownOutcomeResponse(failure.error);
  request.log.outcomeUnknown = true;
  if (policy.unknownOutcome === 'fail') {
    // At most once: this answer is what every repeat gets until an operator clears the key.
    await storeCall(
      deps,
      request,
      'complete',
      () => deps.store.complete(id, fence, unknown, policy.ttlMs),
      false,
    );
  }
  // Under `retry` the claim stays in progress; a repeat takes it over once the lease ends.
  if (clientAlreadyAnswered) return;
  // Shadow mode answers as a pass-through route would: the same 502/504, without our marker.
  if (!policy.enforce) sendProblem(request.res, failure.error);
  else writeWhole(request.res, unknown.status, unknown.headers, unknown.body);
}

function replay(request: ProtectedRequest, stored: StoredResponse): void {
  const { res, policy, log } = request;
  log.outcome = 'replayed';
  const extra: [string, string][] = [[policy.replayedHeader, 'true']];
  if (log.keyDerived) extra.push([DERIVED_KEY_HEADER, 'true']);
  if (stored.bodyOmitted) extra.push([BODY_OMITTED_HEADER, 'true']);
  writeWhole(res, stored.status, stored.headers, stored.body, extra);
}

function reused(request: ProtectedRequest, key: string): void {
  fail(
    request,
    'mismatch',
    new ProxyError(
      'IDEMPOTENCY_KEY_REUSED',
      'This key was already used with a different request (method, path, query or body). Use a new key for a new request, or resend the original request unchanged to get its stored response.',
      { route: request.route.name, key },
    ),
  );
}

function inFlight(request: ProtectedRequest, key: string, leaseRemainingMs: number): void {
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

function fail(request: ProtectedRequest, outcome: Outcome, error: ProxyError): void {
  request.log.outcome = outcome;
  sendProblem(request.res, error);
}

/**
 * Runs a store operation; on failure answers 503 (unless told not to, or in shadow mode) and returns
 * undefined.
 */
async function storeCall<T>(
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
      fail(
        request,
        'store_unavailable',
        new ProxyError(
          'STORE_UNAVAILABLE',
          'The idempotency store (PostgreSQL) cannot be reached, so the request was not forwarded. Retry later with the same key.',
          {
            route: request.route.name,
            key: request.log.key,
            retryAfterSeconds: STORE_RETRY_AFTER_SECONDS,
            cause: error,
          },
        ),
      );
    }
    return undefined;
  } finally {
    const ms = performance.now() - started;
    request.log.storeMs += ms;
    deps.observer?.storeCall(operation, ms, failure);
  }
}

/** The problem answer for a request that may have run: stored under `fail`, marked either way. */
function unknownOutcomeResponse(error: ProxyError): StoredResponse {
  const body = Buffer.from(JSON.stringify(problemBody(error)));
  const headers: HeaderPairs = [
    ...problemHeaders(error, body.length).filter(([name]) => name !== 'content-length'),
    [OUTCOME_HEADER, 'unknown'],
  ];
  return { status: error.status, headers, body, bodyOmitted: false, outcomeUnknown: true };
}
