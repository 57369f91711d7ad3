// What to do with a protected request once its key and fingerprint are known
// (README.md#what-a-client-sees-on-a-protected-route): answer it from memory (the store's replay
// cache, this process's first request of the key), or claim it in the store and decide from what
// the claim says. `decide` only decides; `answerCall` carries the decision out: respond
// (respond.ts), forward under the claim (forward.ts), or — shadow mode — forward unstored.
//
//   claim ─┬─ claimed ──► forward
//          ├─ completed ─► replay
//          ├─ mismatch ──► 422 (record untouched)
//          └─ in flight ─┬─ lease left ─► 409 + Retry-After, or (wait) block until it changes
//                        └─ lease over ─► fail: settle as unknown, replay
//                                         retry: take over (fence + 1), forward
//
// A store failure anywhere before the forward is StoreUnavailable (store-call.ts): 503 here, in
// one place, or in shadow mode the request is forwarded anyway.
import { performance } from 'node:perf_hooks';
import { ProxyError } from '../errors';
import { type RecordId, recordText } from '../store/record';
import { tenantHash } from '../idempotency/tenant';
import {
  type Answer,
  inFlight,
  problem,
  replayOf,
  reused,
  unknownOutcomeResponse,
  clearHint,
  CLIENT_GONE,
} from './answer';
import type { ProtectedDeps, ProtectedRequest } from './context';
import { followLeader } from './follow-leader';
import { forward } from './forward';
import type { Leader } from './local-keys';
import { respond } from './respond';
import { forwardUnstored, type ShadowVerdict, shadowVerdict } from './shadow';
import { storeCall, StoreUnavailable, storeUnavailableError } from './store-call';
import { waitForChange } from './wait-for-change';

/** A protected request with its key decided: what is claimed, matched and forwarded. */
export interface Call {
  readonly id: RecordId;
  readonly fingerprint: Buffer;
  readonly body: Buffer;
  /** The raw fingerprint of a large body (fingerprint.ts), when there is one. */
  readonly raw?: Buffer;
}

export type Decision =
  | Answer
  /** This request holds the claim: forward it, then complete or release with `fence`. */
  | { readonly kind: 'forward'; readonly fence: string }
  /** Shadow mode: forward anyway, unstored, and log what enforcement would have done. */
  | { readonly kind: 'shadow'; readonly verdict: ShadowVerdict };

/** Rounds of claim → (take over | settle) before giving up with a 409; only races need more than one. */
const MAX_CLAIM_ROUNDS = 3;
/** Rounds of "the leader learnt nothing for us, lead or follow again" before asking the store alone. */
const MAX_LOCAL_ROUNDS = 3;

export function recordIdOf(request: ProtectedRequest, key: string): RecordId {
  const { policy } = request;
  return { scope: policy.scope, tenant: tenantHash(request.req.headers, policy.tenant), key };
}

/** Answers a protected request: replay, 409, 422 or 503 — or forwards it under its claim. */
export async function answerCall(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  call: Call,
): Promise<void> {
  try {
    await answerCallOrThrow(deps, request, call);
  } catch (error) {
    if (!(error instanceof StoreUnavailable)) throw error;
    // Nothing was forwarded: fail closed, or in shadow mode forward anyway.
    if (!request.policy.enforce)
      return forwardUnstored(
        deps.upstreams,
        request,
        call.id.key,
        call.body,
        'would_reject_store_unavailable',
      );
    respond(request, problem('store_unavailable', storeUnavailableError(request, error.cause)));
  }
}

async function answerCallOrThrow(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  call: Call,
): Promise<void> {
  const { policy, log } = request;
  const { id, fingerprint, raw } = call;
  if (policy.enforce) {
    const cached = deps.store.answerFromMemory(id, fingerprint, raw);
    if (cached) {
      log.cached = true;
      const answer =
        cached.kind === 'replay'
          ? replayOf(cached.response)
          : reused(request.route.name, id.key, request.mcp !== undefined);
      return respond(request, answer);
    }
  }
  // Shadow mode forwards every repeat anyway: nothing to coalesce.
  const local = policy.enforce ? deps.localKeys : undefined;
  if (local !== undefined) {
    const text = recordText(id);
    for (let round = 0; round < MAX_LOCAL_ROUNDS; round++) {
      const leader = local.lead(text, fingerprint, raw);
      if (leader !== undefined) return lead(deps, request, call, leader);
      const followed = await followLeader(deps, request, id, fingerprint, raw);
      if (followed.kind !== 'ask-store') return respond(request, followed);
      if (!followed.lead) break;
    }
  }
  return act(deps, request, call, await decide(deps, request, call, undefined), undefined);
}

/** The first request of its key in this process: decides, acts, and tells the repeats. */
async function lead(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  call: Call,
  leader: Leader,
): Promise<void> {
  try {
    return await act(deps, request, call, await decide(deps, request, call, leader), leader);
  } catch (error) {
    if (error instanceof StoreUnavailable) leader.settle({ kind: 'store-down' });
    throw error;
  } finally {
    leader.settle({ kind: 'ask-store' });
  }
}

function act(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  call: Call,
  decision: Decision,
  leader: Leader | undefined,
): Promise<void> | void {
  switch (decision.kind) {
    case 'forward':
      leader?.forwarding(request.policy.lockTimeoutMs);
      return forward(deps, request, call.id, decision.fence, call.body, leader);
    case 'shadow':
      return forwardUnstored(deps.upstreams, request, call.id.key, call.body, decision.verdict);
    default:
      return respond(request, decision);
  }
}

/**
 * Claims (scope, key) in the store and decides from what it says; a leader (local-keys.ts) is told
 * what was learnt, for the repeats of its key in this process.
 */
export async function decide(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  call: Call,
  leader: Leader | undefined,
): Promise<Decision> {
  const { route, policy, log } = request;
  const { id, fingerprint } = call;
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
        raw: call.raw,
      }),
    );
    log.attempts = claim.attempts;

    const wouldHave = policy.enforce ? undefined : shadowVerdict(claim, policy);
    if (wouldHave !== undefined) return { kind: 'shadow', verdict: wouldHave };

    switch (claim.kind) {
      case 'claimed':
        return { kind: 'forward', fence: claim.fence };
      case 'completed':
        leader?.settle({ kind: 'stored', response: claim.response });
        return replayOf(claim.response);
      case 'mismatch':
        leader?.settle({ kind: 'mismatch' });
        return reused(route.name, key, request.mcp !== undefined);
      case 'in-flight': {
        if (claim.leaseRemainingMs > 0) {
          if (policy.onConcurrent !== 'wait') {
            leader?.settle({ kind: 'in-flight', leaseRemainingMs: claim.leaseRemainingMs });
            return inFlight(route.name, key, claim.leaseRemainingMs);
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
          if (waited.kind === 'client-gone') return CLIENT_GONE;
          if (waited.kind === 'timeout') return inFlight(route.name, key, waited.leaseRemainingMs);
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
          if (fence !== null) return { kind: 'forward', fence };
        } else {
          const unknown = unknownOutcomeResponse(
            request,
            new ProxyError(
              'IDEMPOTENCY_OUTCOME_UNKNOWN',
              `The first request with this key was interrupted before its result was stored (the proxy stopped or lost the upstream), so it may have run upstream. It will not be forwarded again; check the upstream, then, if it must run, ${clearHint(policy)}`,
              { route: route.name, key },
            ),
          );
          const settled = await storeCall(deps, request, 'settle unknown', () =>
            deps.store.settleUnknown(id, claim.fence, unknown, policy.ttlMs),
          );
          if (settled !== null) {
            log.outcomeUnknown = true;
            leader?.settle({ kind: 'stored', response: settled });
            return replayOf(settled);
          }
        }
        break; // someone else moved the record on: read it again
      }
    }
  }
  if (!policy.enforce) return { kind: 'shadow', verdict: 'would_reject_in_flight' };
  return inFlight(route.name, key, 1_000);
}
