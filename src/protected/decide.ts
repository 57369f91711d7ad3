// What to do with a protected request, given what its claim found (docs/record-lifecycle.md). Pure:
// the claim, the route's policy and how the request's waiting stands in, one Decision out; the
// pipeline (pipeline.ts) carries it out. Table-tested in test/unit/decide.test.ts.
//
//   claim ─┬─ claimed ──► forward
//          ├─ completed ─► replay
//          ├─ mismatch ──► 422 (record untouched)
//          ├─ attached ──► attach (onConcurrent: attach, a stream running in this process)
//          └─ in flight ─┬─ lease left ─► 409 + Retry-After, or (wait, attach) wait until it changes
//                        └─ lease over ─► fail: settle as unknown, replay
//                                         retry: take over, forward
//
// Shadow mode (`enforce: false`) forwards wherever enforcement would answer for the upstream, and
// only logs what it would have done (docs/operations.md#shadow-mode).
import type { IdempotencyPolicy } from '../config/types';
import type { ProxyError } from '../errors';
import type { RequestLogEntry } from '../http/request-log';
import type { LiveAnswer } from '../store/live-answer';
import type { ClaimResult, StoredResponse } from '../store/record';

export type ShadowVerdict = NonNullable<RequestLogEntry['shadow']>;

/** How a request's claiming stands: the part of decide's input that is not the claim. */
export interface Attempt {
  /** Take-overs and settles that found the record moved on (a lost race: claim again). */
  readonly races: number;
  /** True once this request's wait ran past waitTimeout. */
  readonly waitOver: boolean;
  /** How long this request has waited since its claim was read. */
  readonly waitedMs: number;
  /** True once a wait saw the client go. */
  readonly clientLeft: boolean;
}

export type Decision =
  /** This request holds the claim: forward it, then settle it with `fence`. */
  | { readonly kind: 'forward'; readonly fence: string }
  | { readonly kind: 'replay'; readonly response: StoredResponse }
  | { readonly kind: 'mismatch' }
  | { readonly kind: 'in-flight'; readonly leaseRemainingMs: number }
  /** onConcurrent: wait — wait for the record to change, then claim again. */
  | { readonly kind: 'wait' }
  /** onConcurrent: attach — join the answer this process's first request is streaming. */
  | { readonly kind: 'attach'; readonly live: LiveAnswer }
  /** The holder's lease ended (unknownOutcome: retry): take the claim over and forward. */
  | { readonly kind: 'take-over'; readonly fence: string }
  /** The holder's lease ended (unknownOutcome: fail): store the unknown outcome and replay it. */
  | { readonly kind: 'settle-unknown'; readonly fence: string }
  /** Shadow mode: forward anyway, unstored, and log what enforcement would have done. */
  | { readonly kind: 'shadow'; readonly verdict: ShadowVerdict }
  /** A waiting request whose client left: nobody to answer. */
  | { readonly kind: 'client-gone' }
  // After the forward, what becomes of the claim:
  | { readonly kind: 'complete'; readonly response: StoredResponse }
  | { readonly kind: 'release' }
  /** The upstream may have acted, and nothing says what it answered. */
  | { readonly kind: 'unknown'; readonly error: ProxyError };

export type Settlement = Extract<Decision, { kind: 'complete' | 'release' | 'unknown' }>;
/** What a claim can decide: everything but settling. */
export type ClaimDecision = Exclude<Decision, Settlement>;

/** Rounds of claim → (take over | settle) lost to a race before giving up with a 409. */
export const MAX_RACES = 3;

export const NOT_WAITED: Attempt = { races: 0, waitOver: false, waitedMs: 0, clientLeft: false };

export function decide(
  claim: ClaimResult,
  policy: IdempotencyPolicy,
  attempt: Attempt = NOT_WAITED,
): ClaimDecision {
  if (attempt.clientLeft) return { kind: 'client-gone' };
  if (attempt.races >= MAX_RACES) {
    if (!policy.enforce) return { kind: 'shadow', verdict: 'would_reject_in_flight' };
    return { kind: 'in-flight', leaseRemainingMs: 1_000 };
  }
  if (!policy.enforce) {
    const verdict = shadowVerdict(claim, policy);
    if (verdict !== undefined) return { kind: 'shadow', verdict };
  }
  switch (claim.kind) {
    case 'claimed':
      return { kind: 'forward', fence: claim.fence };
    case 'completed':
      return { kind: 'replay', response: claim.response };
    case 'mismatch':
      return { kind: 'mismatch' };
    case 'attached':
      return { kind: 'attach', live: claim.live };
    case 'in-flight': {
      const lease = claim.leaseRemainingMs;
      if (lease > 0) {
        // Across instances there is no stream to attach to: attach waits for the record.
        const waits = policy.onConcurrent !== 'reject' && claim.full !== true && !attempt.waitOver;
        if (waits) return { kind: 'wait' };
        return { kind: 'in-flight', leaseRemainingMs: Math.max(1, lease - attempt.waitedMs) };
      }
      if (policy.unknownOutcome === 'retry') return { kind: 'take-over', fence: claim.fence };
      return { kind: 'settle-unknown', fence: claim.fence };
    }
  }
}

/**
 * What enforcement would have answered instead of forwarding, given the claim; undefined when it
 * would have forwarded too: the claim was won, or (unknownOutcome: retry) an in-flight claim whose
 * lease ended is taken over as usual. Under `fail` such a claim would replay its unknown outcome.
 */
function shadowVerdict(claim: ClaimResult, policy: IdempotencyPolicy): ShadowVerdict | undefined {
  switch (claim.kind) {
    case 'claimed':
      return undefined;
    case 'completed':
      return 'would_replay';
    case 'mismatch':
      return 'would_reject_mismatch';
    case 'attached':
      return 'would_wait';
    case 'in-flight':
      if (claim.leaseRemainingMs > 0)
        return policy.onConcurrent === 'reject' ? 'would_reject_in_flight' : 'would_wait';
      return policy.unknownOutcome === 'retry' ? undefined : 'would_replay';
  }
}
