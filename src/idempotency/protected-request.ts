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
import { performance } from 'node:perf_hooks';
import { ProxyError } from '../errors';
import { BodyTooLargeError, type DigestedBody, readDigestedBody } from '../http/body';
import { deriveKey, derivedKeyPolicy } from './derived-key';
import { DuplicateJsonKeyError } from './canonical-json';
import {
  computeFingerprint,
  computeRawFingerprint,
  type FingerprintInput,
  RAW_FINGERPRINT_MIN_BYTES,
} from './fingerprint';
import { keyHeaderLines, type KeyParseResult, parseIdempotencyKey } from './key';
import { type RecordId, recordText } from './record';
import { forwardUnstored, passThroughInShadow, readBodyOrRewind, shadowVerdict } from './shadow';
import { tenantHash } from './tenant';
import { type ProtectedDeps, type ProtectedRequest } from './protected-context';
import { fail, inFlight, replay, reused, storeCall, unknownOutcomeResponse } from './answers';
import { waitForChange } from './wait-for-change';
import { answeredByRaw, followLeader } from './follow-leader';
import type { Leader } from './local-keys';
import { forward } from './forward-and-store';

export type { ProtectedDeps, ProtectedObserver, ProtectedRequest } from './protected-context';

const EMPTY_BODY = Buffer.alloc(0);

function wholeBody(body: Buffer): DigestedBody {
  return { body: () => body, sha256: undefined };
}

/** Rounds of claim → (take over | settle) before giving up with a 409; only races need more than one. */
const MAX_CLAIM_ROUNDS = 3;
/** Rounds of "the leader learnt nothing for us, lead or follow again" before asking the store alone. */
const MAX_LOCAL_ROUNDS = 3;

export async function handleProtectedRequest(
  deps: ProtectedDeps,
  request: ProtectedRequest,
): Promise<void> {
  const { req, res, route, policy, log } = request;

  const parsed = parseIdempotencyKey(keyHeaderLines(req, policy.key.header), policy.key.maxLength);
  // No key header on a route with key.derive: the key is derived once the body is read. A key that
  // was sent but is invalid is never replaced by a derived one: that would hide a client bug.
  const derivesKey = !parsed.ok && parsed.problem === 'missing' && policy.key.derive !== null;
  if (!parsed.ok && !derivesKey) return refuseKey(deps, request, parsed);
  if (parsed.ok) log.key = parsed.key;

  let read: DigestedBody;
  try {
    read = policy.enforce
      ? await readDigestedBody(req, policy.maxRequestBytes, RAW_FINGERPRINT_MIN_BYTES)
      : wholeBody(await readBodyOrRewind(req, policy.maxRequestBytes));
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
    method: request.target.method,
    path: request.target.path,
    query: request.target.query,
    headers: req.headers,
    body: EMPTY_BODY,
    contentType: req.headers['content-type'],
  };
  // A repeat of a large body is first looked up by its raw fingerprint (the SHA-256 of its bytes,
  // taken as they arrived): a body seen before needs no canonical JSON, which costs tens of
  // milliseconds a megabyte, and is not even joined into one buffer.
  let raw: Buffer | undefined;
  if (parsed.ok && read.sha256 !== undefined) {
    raw = computeRawFingerprint(input, policy.fingerprint, read.sha256);
    if (await answeredByRaw(deps, request, recordIdOf(request, parsed.key), raw)) return;
  }
  const body = read.body();
  input.body = body;
  // Only a route with key.derive gets here without a key (refuseKey took every other keyless
  // request). A derived key's record lives for key.window instead of ttl; the rest is as for a sent key.
  let key: string;
  let fingerprint: Buffer;
  try {
    key = parsed.ok ? parsed.key : deriveKey(policy.key.derive!, input, policy.fingerprint.ignore);
    fingerprint = computeFingerprint(input, policy.fingerprint);
  } catch (error) {
    if (!(error instanceof DuplicateJsonKeyError)) throw error;
    const sentKey = parsed.ok ? parsed.key : undefined;
    if (!policy.enforce)
      return forwardUnstored(deps.upstreams, request, sentKey, body, 'would_reject_duplicate_key');
    return fail(
      request,
      'bad_request',
      new ProxyError(
        'JSON_DUPLICATE_KEY',
        'The JSON body has an object with the same key twice, which parsers read differently (first or last value), so the proxy cannot know what the upstream would act on. Send each key once.',
        { route: route.name, key: sentKey },
      ),
    );
  }
  if (parsed.ok) return claimAndAnswer(deps, request, key, fingerprint, body, raw);
  log.key = key;
  log.keyDerived = true;
  return claimAndAnswer(
    deps,
    { ...request, policy: derivedKeyPolicy(policy) },
    key,
    fingerprint,
    body,
  );
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
    deps.passThrough.web(request.req, request.res, route, request.target);
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
export async function claimAndAnswer(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  key: string,
  fingerprint: Buffer,
  body: Buffer,
  raw?: Buffer,
): Promise<void> {
  const { policy, log } = request;
  const id = recordIdOf(request, key);
  if (policy.enforce && deps.cache) {
    const cached = deps.cache.lookup(id, fingerprint, raw);
    if (cached) {
      log.cached = true;
      return cached.kind === 'replay' ? replay(request, cached.response) : reused(request, key);
    }
  }
  // Shadow mode forwards every repeat anyway: nothing to coalesce.
  const local = policy.enforce ? deps.localKeys : undefined;
  if (local === undefined) return claimLoop(deps, request, id, fingerprint, body, undefined);

  const text = recordText(id);
  for (let round = 0; round < MAX_LOCAL_ROUNDS; round++) {
    const leader = local.lead(text, fingerprint, raw);
    if (leader !== undefined) {
      try {
        return await claimLoop(deps, request, id, fingerprint, body, leader, raw);
      } finally {
        leader.settle({ kind: 'ask-store' });
      }
    }
    const unanswered = await followLeader(deps, request, id, fingerprint, raw);
    if (unanswered === undefined) return;
    if (!unanswered.lead) return claimLoop(deps, request, id, fingerprint, body, undefined, raw);
  }
  return claimLoop(deps, request, id, fingerprint, body, undefined, raw);
}

function recordIdOf(request: ProtectedRequest, key: string): RecordId {
  const { policy } = request;
  return { scope: policy.scope, tenant: tenantHash(request.req.headers, policy.tenant), key };
}

/**
 * Claims (scope, key) in the store and answers from what it says; a leader (local-keys.ts) tells the
 * repeats of its key in this process what it learnt.
 */
async function claimLoop(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  id: RecordId,
  fingerprint: Buffer,
  body: Buffer,
  leader: Leader | undefined,
  raw?: Buffer,
): Promise<void> {
  const { route, policy, log } = request;
  const key = id.key;
  // Only wait once per request: `waitDeadline` is fixed when the first wait starts.
  let waitDeadline: number | undefined;
  for (let round = 0; round < MAX_CLAIM_ROUNDS; round++) {
    const claim = await storeCall(deps, request, 'claim', () =>
      deps.store.claim({
        id,
        route: route.name,
        fingerprint,
        leaseMs: policy.lockTimeoutMs,
        claimExpiryMs: policy.lockTimeoutMs + policy.ttlMs,
      }),
    );
    if (claim === undefined) {
      leader?.settle({ kind: 'store-down' });
      return storeUnavailable(deps, request, key, body);
    }
    log.attempts = claim.attempts;

    const wouldHave = policy.enforce ? undefined : shadowVerdict(claim, policy);
    if (wouldHave !== undefined)
      return forwardUnstored(deps.upstreams, request, key, body, wouldHave);

    switch (claim.kind) {
      case 'claimed':
        leader?.forwarding(policy.lockTimeoutMs);
        return forward(deps, request, id, claim.fence, body, leader);
      case 'completed':
        deps.cache?.remember(id, fingerprint, claim.response, claim.expiresInMs, raw);
        leader?.settle({ kind: 'stored', response: claim.response });
        return replay(request, claim.response);
      case 'mismatch':
        leader?.settle({ kind: 'mismatch' });
        return reused(request, key);
      case 'in-flight': {
        if (claim.leaseRemainingMs > 0) {
          if (policy.onConcurrent !== 'wait') {
            leader?.settle({ kind: 'in-flight', leaseRemainingMs: claim.leaseRemainingMs });
            return inFlight(request, key, claim.leaseRemainingMs);
          }
          leader?.waiting(claim.leaseRemainingMs);
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
            deps.store.takeOver(
              id,
              claim.fence,
              policy.lockTimeoutMs,
              policy.lockTimeoutMs + policy.ttlMs,
            ),
          );
          if (fence === undefined) {
            leader?.settle({ kind: 'store-down' });
            return storeUnavailable(deps, request, key, body);
          }
          if (fence !== null) {
            leader?.forwarding(policy.lockTimeoutMs);
            return forward(deps, request, id, fence, body, leader);
          }
        } else {
          const unknown = unknownOutcomeResponse(
            request,
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
            leader?.settle({ kind: 'stored', response: settled });
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
