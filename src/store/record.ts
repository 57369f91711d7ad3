// The idempotency record's lifecycle and the store interface the protected pipeline
// (protected/pipeline.ts) talks to. The PostgreSQL implementation is postgres/key-store.ts; the
// request path reaches it through coalescing-store.ts, which answers what memory can.
//
//   claim ──► in_progress ──► complete ──► completed ──(expires_at)──► absent
//                 │  └─ release (status in `release`, nothing sent) ──► absent
//                 └─ lease ends (crash, unknown outcome under `retry`)
//                       ├─ unknownOutcome: fail  ──► completed with the unknown-outcome answer
//                       └─ unknownOutcome: retry ──► taken over: a new fence, forwarded again

import { hash } from 'node:crypto';
import type { HeaderPairs } from '../http/headers';
import type { LiveAnswer } from './live-answer';

export const RECORD_STATE = { IN_PROGRESS: 'in_progress', COMPLETED: 'completed' } as const;
export type RecordState = (typeof RECORD_STATE)[keyof typeof RECORD_STATE];

/** Identifies one record: the primary key. */
export interface RecordId {
  /** Route name or idempotency.group. */
  readonly scope: string;
  /** Hex SHA-256 of the tenant parts, '' when the route is not tenanted. */
  readonly tenant: string;
  readonly key: string;
}

/** Requests answered without the store (coalescing-store.ts), added to a record later. */
export interface CounterDelta {
  readonly id: RecordId;
  attempts: number;
  replays: number;
}

export type { HeaderPairs };

export interface StoredResponse {
  readonly status: number;
  readonly headers: HeaderPairs;
  /** Empty when bodyOmitted. */
  readonly body: Buffer;
  readonly bodyOmitted: boolean;
  readonly outcomeUnknown: boolean;
  /**
   * When the record expires (epoch ms, the database's clock): set on an answer read from or written
   * to the store, so every delivery of it says how long a retry stays safe (Idempotency-Expires).
   */
  readonly expiresAt?: number;
  /**
   * Only on the unknown outcome of an answer that broke off after its head: what the upstream had
   * sent, written with the record for the operator (admin API, `inspect`). Never replayed, never
   * read back on the request path.
   */
  readonly partial?: PartialAnswer;
}

/** The part of an upstream's answer that arrived before it broke off (a stall, a dropped connection). */
export interface PartialAnswer {
  readonly status: number;
  /** As a replay would send them: no hop-by-hop headers, Set-Cookie as the route keeps it. */
  readonly headers: HeaderPairs;
  /** The first bytes of the body, up to maxResponseBytes. */
  readonly body: Buffer;
  /** Body bytes the upstream had sent; more than body.length when the prefix was cut. */
  readonly bytes: number;
}

export type ClaimResult = ClaimState & {
  /** Requests seen for this record so far, this one included (0 when answered from memory). */
  readonly attempts: number;
  /**
   * Set when memory answered instead of the database (coalescing-store.ts): the replay cache, or
   * this process's first request of the key.
   */
  readonly from?: 'cache' | 'leader';
};

export type ClaimState =
  /**
   * This request owns the record and must forward, then complete or release with `fence`: the claim's
   * own token, never reused (not a counter: after a release deletes the row, a new claim would count
   * from 1 again, and a late former holder's write would land on it).
   */
  | { readonly kind: 'claimed'; readonly fence: string }
  /** Same fingerprint, completed: replay it. */
  | { readonly kind: 'completed'; readonly response: StoredResponse; readonly expiresInMs: number }
  /** A different request used this key. */
  | { readonly kind: 'mismatch' }
  /** Same fingerprint, still in progress; leaseRemainingMs is 0 once the lease has ended. */
  | {
      readonly kind: 'in-flight';
      readonly fence: string;
      readonly leaseRemainingMs: number;
      /** The key already has its maxWaitersPerKey waiters in this process: do not wait too. */
      readonly full?: boolean;
    }
  /**
   * Only from memory (coalescing-store.ts), under onConcurrent: attach: this process's first request
   * of the key is streaming its answer; the repeat joins it.
   */
  | { readonly kind: 'attached'; readonly live: LiveAnswer };

export interface ClaimRequest {
  readonly id: RecordId;
  readonly route: string;
  readonly fingerprint: Buffer;
  readonly leaseMs: number;
  /**
   * How long the in-progress row lives: the lease plus the ttl an answer settled at the lease's end
   * would have, so a slow first request is never mistaken for an expired one while it may still run.
   */
  readonly claimExpiryMs: number;
  /** The request's raw fingerprint (fingerprint.ts), when it has one: a cache remembers it with a replay. */
  readonly raw?: Buffer;
  /**
   * The route's fingerprint policy (config/types.ts fingerprintEpoch): what memory answers the
   * request by goes with it (memoryKey). The pipeline always sets it; a store's own tests may not.
   */
  readonly fingerprintEpoch?: string;
  /**
   * The request behind the claim, when its repeats in this process may be coalesced with it
   * (coalescing-store.ts); absent in shadow mode, where every repeat is forwarded anyway.
   */
  readonly claimant?: Claimant;
}

/**
 * One request's part in claiming its key: how it treats an in-flight record and whether its client
 * is still there. A store that coalesces one process's claims of a key (coalescing-store.ts) keeps
 * what it learns with the key's first claimant and lets go of it at end(), which the request calls
 * once it is done with the key, however it ended.
 */
export class Claimant {
  private gone: Promise<'gone'> | undefined;
  private left = false;
  private cleanup: (() => void) | undefined;

  constructor(
    readonly onConcurrent: 'reject' | 'wait' | 'attach',
    /** performance.now() after which a waiting claimant stops waiting (waitTimeout). */
    readonly deadline: number,
    /** How many requests may wait on one in-flight key in this process (maxWaitersPerKey). */
    readonly maxWaiters: number,
    private readonly whenClientGone: () => Promise<unknown>,
    /**
     * Under onConcurrent: attach, the answer this request streams if it gets the claim: repeats in
     * this process attach to it (live-answer.ts).
     */
    readonly live?: LiveAnswer,
  ) {}

  /** Resolves once the client has gone; made on first use, since most requests never wait. */
  clientGone(): Promise<'gone'> {
    return (this.gone ??= this.whenClientGone().then(() => {
      this.left = true;
      return 'gone' as const;
    }));
  }

  /** True once a wait saw the client go. */
  get clientLeft(): boolean {
    return this.left;
  }

  /** What the store must undo when the request is done with the key (one per claimant). */
  onEnd(cleanup: () => void): void {
    this.cleanup = cleanup;
  }

  end(): void {
    const cleanup = this.cleanup;
    this.cleanup = undefined;
    cleanup?.();
  }
}

/** What a waiter sees when it looks at a record without touching it. */
export type PeekResult =
  | { readonly kind: 'absent' }
  | { readonly kind: 'mismatch' }
  | { readonly kind: 'completed' }
  | { readonly kind: 'in-flight'; readonly leaseRemainingMs: number };

/**
 * What became of a completion or a release: `stored` (it is in the record), `queued` (its statement
 * failed and this process keeps sending it in the background, postgres/write-outbox.ts: an answer
 * is not in the record yet), or `stale` (the record no longer carries the claim's token: taken
 * over, released, or gone; nothing was written).
 */
export type Landing = 'stored' | 'queued' | 'stale';

/**
 * What a completion became. `expiresAt` (ms since the epoch, the database's clock) is known when the
 * statement that stored it returned it; one stored by a retry of the outbox does not carry it.
 */
export interface CompleteResult {
  readonly landing: Landing;
  readonly expiresAt?: number;
}

/**
 * The store. `claimant`, where a method takes one, is the request doing it (see Claimant); a store
 * that keeps nothing in memory ignores it.
 */
export interface KeyStore {
  claim(request: ClaimRequest): Promise<ClaimResult>;
  /**
   * Stores the answer under the claim with `fence` (see Landing); once stored, with the record's
   * expiry as the database set it (its Idempotency-Expires). `followUp` is a write that belongs with
   * the completion (an unknown outcome's reconcile body): when the completion is `queued`, the store
   * makes it once the completion has landed; when it is stored at once, the caller makes it.
   */
  complete(
    id: RecordId,
    fence: string,
    response: StoredResponse,
    ttlMs: number,
    claimant?: Claimant,
    followUp?: () => Promise<unknown>,
  ): Promise<CompleteResult>;
  /** Drops an in-progress claim so a retry executes again (see Landing). */
  release(id: RecordId, fence: string, claimant?: Claimant): Promise<Landing>;
  /** Adds attempts/replays of requests answered without the store to their records. */
  flushCounters(deltas: readonly CounterDelta[]): Promise<void>;
  /** Reads a record's state without counting an attempt (for waiters). */
  peek(id: RecordId, fingerprint: Buffer): Promise<PeekResult>;
  /**
   * Takes over an in-progress claim whose lease ended, extending its life to at least claimExpiryMs;
   * returns the new fence, or null if someone else did.
   */
  takeOver(
    id: RecordId,
    fence: string,
    leaseMs: number,
    claimExpiryMs: number,
    claimant?: Claimant,
  ): Promise<string | null>;
  /**
   * Completes an in-progress claim whose lease ended with the unknown-outcome answer and counts the
   * replay; returns what is stored now, or null when the record moved on (re-claim to see it).
   */
  settleUnknown(
    id: RecordId,
    fence: string,
    response: StoredResponse,
    ttlMs: number,
    claimant?: Claimant,
  ): Promise<StoredResponse | null>;
}

/**
 * The store as a protected request sees it: a KeyStore that can also wait, without holding a
 * connection, for an in-flight record to change (onConcurrent: wait).
 */
export interface RequestStore extends KeyStore {
  /**
   * What memory alone answers this claim with, in the caller's own turn: a completed record (or a
   * mismatch) the replay cache holds for it; undefined when only claim() can tell — the database,
   * or this process's first request of the key. Counted into the record's counters as claim()
   * counts the answers memory gives.
   */
  recall(request: ClaimRequest): ClaimResult | undefined;
  /**
   * Returns once the record may have changed (completed, released, lease over), the claimant's
   * deadline passed, or its client went away; claim again to see which.
   */
  waitForChange(id: RecordId, fingerprint: Buffer, claimant: Claimant): Promise<void>;
}

/** A record's identity as one string, for maps on the request path (no hashing). */
export function recordText(id: RecordId): string {
  return `${id.scope}\u0000${id.tenant}\u0000${id.key}`;
}

/**
 * What memory answers a repeat by (the replay cache and local-keys.ts, through coalescing-store.ts):
 * the record, and the fingerprint policy the request was fingerprinted under. The database compares
 * a repeat's fingerprint, computed under the policy of the route it came through, with the row's;
 * memory must not answer a request fingerprinted otherwise (another route of the group, or the
 * route before a reload changed its `fingerprint` or `ignore`) from what it learnt for this one.
 */
export function memoryKey(id: RecordId, fingerprintEpoch = ''): string {
  return `${fingerprintEpoch}\u0000${id.scope}\u0000${id.tenant}\u0000${id.key}`;
}

/** A record's identity in a completion NOTIFY payload: short, fixed-size, and free of the raw key. */
export function recordDigest(id: RecordId): string {
  return hash('sha256', `${id.scope}\n${id.tenant}\n${id.key}`, 'base64url');
}

/** Wakes requests waiting on an in-flight record (onConcurrent: wait) when it completes or is released. */
export interface CompletionWaiter {
  /** Resolves when the record with this digest may have changed; `cancel` must be called when done. */
  waitFor(digest: string): { readonly changed: Promise<void>; cancel(): void };
}
