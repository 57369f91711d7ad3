// The store as the request path sees it: a KeyStore (PostgreSQL, or the tests' in-memory one) with
// every memory shortcut in front, so the pipeline asks one thing — claim — and this file alone knows
// whether memory could answer:
//
//   claim ─┬─ replay cache: a completed record, by the body's bytes or its fingerprint ─► completed
//          ├─ this process's first request of the key (local-keys.ts) knows the answer ──► as a claim would
//          └─ else claim in the database; the first claimant of a key leads, and what it learns
//             (claimed, completed, mismatch, in flight, store down) answers the repeats behind it
//
// A storm of 3000 retries of one key must not queue 3000 claims on one row and starve every other
// key; correctness across instances still comes from the row alone, since a leader shares only what
// the database told it. Every request answered from memory is counted and added to its record's
// `attempts` and `replays` in batches (flushAnswered), so the audit counters stay right whichever
// answered. As in AWS Powertools' persistence layer, the cache belongs to the store, not to the
// pipeline.
//
// Memory is keyed by memoryKey (record.ts): the record and the fingerprint policy the request was
// fingerprinted under, so a route of a group that fingerprints otherwise, or the route after a
// reload changed its policy, never gets an answer learnt for another policy.
//
// Two subtleties keep a memory answer exactly what the database would say: a repeat with another
// fingerprint is answered 422 only while the leader holds the claim (only then is the row's
// fingerprint known to be the leader's), and a leader that waits for a claim held elsewhere
// (onConcurrent: wait) stays the leader through its wait, so its repeats wait with it instead of
// each polling the row.
import { performance } from 'node:perf_hooks';
import {
  type Claimant,
  type ClaimRequest,
  type ClaimResult,
  type CompletionWaiter,
  type CounterDelta,
  type KeyStore,
  type CompleteResult,
  type Landing,
  memoryKey,
  type PeekResult,
  type RecordId,
  recordDigest,
  recordText,
  type RequestStore,
  type StoredResponse,
} from './record';
import { type Followed, type Leader, LocalKeys } from './local-keys';
import type { ReplayCache } from './replay-cache';

/** How often a waiting request looks at its record when no notification comes. */
const WAIT_POLL_MS = 500;
/** Rounds of "the leader learnt nothing for us, lead or follow again" before asking the store alone. */
const MAX_LOCAL_ROUNDS = 3;

export interface CoalescingOptions {
  /** Wakes waiters when a record completes or is released (completion-listener.ts); else they poll. */
  readonly waiter?: CompletionWaiter;
  /** A counter flush failed: those increments are lost. */
  readonly onFlushError?: (error: unknown) => void;
}

export class CoalescingStore implements RequestStore {
  private readonly pending = new Map<string, CounterDelta>();
  private readonly local = new LocalKeys();
  private readonly leaders = new WeakMap<Claimant, Leader>();
  private timer: NodeJS.Timeout | undefined;
  private flushing: Promise<void> = Promise.resolve();

  /** `cache` undefined (store.replayCache: 0): every repeat claims, and only coalesced ones are counted here. */
  constructor(
    private readonly store: KeyStore,
    readonly cache: ReplayCache | undefined,
    private readonly options: CoalescingOptions = {},
  ) {}

  /** Keys a request of this process is working on right now (for tests). */
  get keysInFlight(): number {
    return this.local.size;
  }

  async claim(request: ClaimRequest): Promise<ClaimResult> {
    const { claimant, id, raw } = request;
    const leader = claimant && this.leaders.get(claimant);
    // No claimant (shadow mode: every repeat is forwarded anyway), or the leader claiming again.
    if (claimant === undefined || leader !== undefined) return this.claimInStore(request, leader);
    // One key for all memory: the replay cache and this process's repeats (memoryKey says why).
    const key = memoryKey(id, request.fingerprintEpoch);
    if (raw !== undefined) {
      // Bytes seen before are answered by their raw fingerprint, without canonical JSON: it costs a
      // small body's replay more than the rest of its answer, and a megabyte tens of milliseconds.
      const cached = this.cachedByBytes(id, key, raw);
      if (cached) return cached;
      // Only a key another request here is working on has a leader to ask: a new key (nearly
      // every claim) goes on without a turn of the event loop.
      if (this.local.has(key)) {
        const followed = await this.follow(key, claimant, request, undefined);
        if (followed.kind !== 'ask-store') return this.followerAnswer(id, claimant, followed);
      }
    }
    const fingerprint = request.fingerprint;
    const cached = this.cachedByFingerprint(id, key, fingerprint, raw);
    if (cached) return cached;
    for (let round = 0; round < MAX_LOCAL_ROUNDS; round++) {
      const leading = this.local.lead(key, fingerprint, raw);
      if (leading !== undefined) {
        this.leaders.set(claimant, leading);
        claimant.onEnd(() => leading.settle({ kind: 'ask-store' }));
        return this.claimInStore(request, leading, key);
      }
      const followed = await this.follow(key, claimant, request, fingerprint);
      if (followed.kind !== 'ask-store') return this.followerAnswer(id, claimant, followed);
      if (!followed.lead) break;
    }
    return this.claimInStore(request, undefined, key);
  }

  recall(request: ClaimRequest): ClaimResult | undefined {
    const { cache } = this;
    if (cache === undefined) return undefined;
    const { id, raw } = request;
    const key = memoryKey(id, request.fingerprintEpoch);
    const byBytes = raw === undefined ? undefined : this.cachedByBytes(id, key, raw);
    if (byBytes) return byBytes;
    // A key another request here is working on is answered through it (claim), and a request the
    // cache knows nothing of needs no fingerprint yet.
    if (this.local.has(key) || !cache.holds(key)) return undefined;
    return this.cachedByFingerprint(id, key, request.fingerprint, raw);
  }

  /** A replay the cache holds for these exact bytes (the raw fingerprint), counted. */
  private cachedByBytes(id: RecordId, key: string, raw: Buffer): ClaimResult | undefined {
    const response = this.cache?.lookupRaw(key, raw);
    return response && this.answered(id, completedFrom('cache', response), key);
  }

  /** What the cache says of this fingerprint, counted: a replay, a mismatch (422), or nothing. */
  private cachedByFingerprint(
    id: RecordId,
    key: string,
    fingerprint: Buffer,
    raw: Buffer | undefined,
  ): ClaimResult | undefined {
    const cached = this.cache?.lookup(key, fingerprint, raw);
    if (cached === undefined) return undefined;
    const result =
      cached.kind === 'replay' ? completedFrom('cache', cached.response) : MISMATCH_FROM_CACHE;
    return this.answered(id, result, key);
  }

  async complete(
    id: RecordId,
    fence: string,
    response: StoredResponse,
    ttlMs: number,
    claimant?: Claimant,
    followUp?: () => Promise<unknown>,
  ): Promise<CompleteResult> {
    // Not cached on completion: most keys are never repeated; the first repeat's claim admits it.
    // Only a stored answer is told to the repeats: one still queued is not the database's yet.
    const result = await this.store.complete(id, fence, response, ttlMs, undefined, followUp);
    if (result.landing === 'stored')
      this.leaderOf(claimant)?.settle({
        kind: 'completed',
        response: { ...response, expiresAt: result.expiresAt },
      });
    return result;
  }

  release(id: RecordId, fence: string): Promise<Landing> {
    return this.store.release(id, fence);
  }

  async takeOver(
    id: RecordId,
    fence: string,
    leaseMs: number,
    claimExpiryMs: number,
    claimant?: Claimant,
  ): Promise<string | null> {
    const leader = this.leaderOf(claimant);
    const taken = await this.withLeader(leader, () =>
      this.store.takeOver(id, fence, leaseMs, claimExpiryMs),
    );
    if (taken !== null) leader?.forwarding(leaseMs, claimant?.live);
    return taken;
  }

  async settleUnknown(
    id: RecordId,
    fence: string,
    response: StoredResponse,
    ttlMs: number,
    claimant?: Claimant,
  ): Promise<StoredResponse | null> {
    const leader = this.leaderOf(claimant);
    const settled = await this.withLeader(leader, () =>
      this.store.settleUnknown(id, fence, response, ttlMs),
    );
    if (settled !== null) leader?.settle({ kind: 'completed', response: settled });
    return settled;
  }

  peek(id: RecordId, fingerprint: Buffer): Promise<PeekResult> {
    return this.store.peek(id, fingerprint);
  }

  flushCounters(deltas: readonly CounterDelta[]): Promise<void> {
    return this.store.flushCounters(deltas);
  }

  /**
   * Blocks until the in-flight record completes, is released, or its lease ends, woken by NOTIFY
   * with polling as the backstop; holds no database connection while waiting, and stops at the
   * claimant's deadline or as soon as its client hangs up.
   */
  async waitForChange(id: RecordId, fingerprint: Buffer, claimant: Claimant): Promise<void> {
    const digest = recordDigest(id);
    const gone = claimant.clientGone();
    const leader = this.leaderOf(claimant);
    for (;;) {
      const subscription = this.options.waiter?.waitFor(digest);
      let timer: NodeJS.Timeout | undefined;
      try {
        // Look after subscribing, so a completion between the claim and now is not missed.
        const seen = await this.withLeader(leader, () => this.store.peek(id, fingerprint));
        if (seen.kind !== 'in-flight' || seen.leaseRemainingMs === 0) return;
        const left = claimant.deadline - performance.now();
        if (left <= 0) return;
        const pause = new Promise<'poll'>((resolve) => {
          timer = setTimeout(
            () => resolve('poll'),
            Math.min(left, WAIT_POLL_MS, seen.leaseRemainingMs),
          );
        });
        if ((await Promise.race([pause, gone, subscription?.changed ?? pause])) === 'gone') return;
      } finally {
        clearTimeout(timer);
        subscription?.cancel();
      }
    }
  }

  /**
   * Counts a request answered without the store into its record's attempts (and replays). `key`
   * names the record's count until the next flush: its memory key where the caller has one, the
   * string its lookup already hashed (a second key built and hashed per request was ~1k
   * instructions of a cached replay). Counts of one record under two keys are added up at the flush.
   */
  countAnswered(id: RecordId, replay: boolean, key = recordText(id)): void {
    let delta = this.pending.get(key);
    if (!delta) this.pending.set(key, (delta = { id, attempts: 0, replays: 0 }));
    delta.attempts++;
    if (replay) delta.replays++;
  }

  /**
   * Adds what was counted so far to the records (one statement), after any flush still running.
   * Counters are an audit aid, not a guarantee: a failed flush loses its increments (onFlushError).
   */
  flushAnswered(): Promise<void> {
    this.flushing = this.flushing.then(async () => {
      if (this.pending.size === 0) return;
      const batch = perRecord(this.pending.values());
      this.pending.clear();
      try {
        await this.store.flushCounters(batch);
      } catch (error) {
        this.options.onFlushError?.(error);
      }
    });
    return this.flushing;
  }

  /** Flushes every `intervalMs` until stopFlushing. */
  startFlushing(intervalMs: number): void {
    this.timer ??= setInterval(() => void this.flushAnswered(), intervalMs);
    this.timer.unref();
  }

  /** Stops the periodic flush and flushes what is pending. */
  async stopFlushing(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.flushAnswered();
  }

  /**
   * The database's claim. A completed record it finds is remembered, so its next repeat needs no
   * round trip; a leader is told what was learnt, for the repeats of its key behind it.
   */
  private async claimInStore(
    request: ClaimRequest,
    leader: Leader | undefined,
    key = memoryKey(request.id, request.fingerprintEpoch),
  ): Promise<ClaimResult> {
    const fingerprint = request.fingerprint;
    // Before the statement is sent: its expiry is counted from here, and an eviction meanwhile
    // keeps what it found out of the cache (replay-cache.ts).
    const asked = this.cache?.asked();
    const result = await this.withLeader(leader, () => this.store.claim(request));
    // An unknown outcome is not remembered: a probe (docs/reconcile.md) or an operator may settle it.
    if (result.kind === 'completed' && asked && !result.response.outcomeUnknown)
      this.cache?.remember(key, asked, {
        id: request.id,
        epoch: request.fingerprintEpoch ?? '',
        fingerprint,
        response: result.response,
        expiresInMs: result.expiresInMs,
        raw: request.raw,
      });
    if (leader === undefined) return result;
    switch (result.kind) {
      case 'claimed':
        leader.forwarding(request.leaseMs, request.claimant?.live);
        break;
      case 'completed':
        leader.settle({ kind: 'completed', response: result.response });
        break;
      case 'mismatch':
        leader.settle({ kind: 'mismatch' });
        break;
      case 'in-flight':
        // A lease that has ended is settled or taken over next, still by this leader.
        if (result.leaseRemainingMs === 0) break;
        if (request.claimant?.onConcurrent !== 'reject') leader.waiting(result.leaseRemainingMs);
        else leader.settle({ kind: 'in-flight', leaseRemainingMs: result.leaseRemainingMs });
    }
    return result;
  }

  /** A repeat behind this process's first request of its key: answered from what that one learns. */
  private follow(
    key: string,
    claimant: Claimant,
    request: ClaimRequest,
    fingerprint: Buffer | undefined,
  ): Promise<Followed> {
    return this.local.follow(key, {
      fingerprint,
      raw: request.raw,
      mode: claimant.onConcurrent,
      deadline: claimant.deadline,
      maxWaiters: claimant.maxWaiters,
      gone: () => claimant.clientGone(),
      leaseMs: request.leaseMs,
    });
  }

  private followerAnswer(
    id: RecordId,
    claimant: Claimant,
    followed: Exclude<Followed, { kind: 'ask-store' }>,
  ): ClaimResult {
    switch (followed.kind) {
      case 'store-down':
        this.countAnswered(id, false);
        throw new LeaderLostStore();
      case 'completed':
        return this.answered(id, completedFrom('leader', followed.response));
      case 'mismatch':
        return this.answered(id, MISMATCH_FROM_LEADER);
      case 'attached':
        this.countAnswered(id, true);
        return { ...followed, attempts: 0, from: 'leader' };
      case 'in-flight': {
        const result: ClaimResult = { ...followed, attempts: 0, from: 'leader' };
        // A follower whose client left is not answered: nothing to count.
        return claimant.clientLeft ? result : this.answered(id, result);
      }
    }
  }

  private answered(id: RecordId, result: ClaimResult, key?: string): ClaimResult {
    this.countAnswered(id, result.kind === 'completed', key);
    return result;
  }

  private leaderOf(claimant: Claimant | undefined): Leader | undefined {
    return claimant && this.leaders.get(claimant);
  }

  /** A leader whose store call fails tells its repeats the store is down (they answer 503 too). */
  private async withLeader<T>(leader: Leader | undefined, call: () => Promise<T>): Promise<T> {
    if (leader === undefined) return call();
    try {
      return await call();
    } catch (error) {
      leader.settle({ kind: 'store-down' });
      throw error;
    }
  }
}

/**
 * A repeat's leader lost the store: the repeat fails as its own store call would have, without a
 * second log line for the one failure (the leader's).
 */
export class LeaderLostStore extends Error {
  constructor() {
    super('the idempotency store failed for the first request of this key in this process');
    this.name = 'LeaderLostStore';
  }
}

const MISMATCH_FROM_CACHE: ClaimResult = { kind: 'mismatch', attempts: 0, from: 'cache' };
const MISMATCH_FROM_LEADER: ClaimResult = { kind: 'mismatch', attempts: 0, from: 'leader' };

function completedFrom(from: 'cache' | 'leader', response: StoredResponse): ClaimResult {
  return { kind: 'completed', response, expiresInMs: 0, attempts: 0, from };
}

/**
 * One delta per record: a record counted under its memory key for two fingerprint policies (a
 * reload changed its route's) is one row, and an UPDATE joined to it twice would add only one.
 */
function perRecord(deltas: Iterable<CounterDelta>): CounterDelta[] {
  const merged = new Map<string, CounterDelta>();
  for (const delta of deltas) {
    const text = recordText(delta.id);
    const known = merged.get(text);
    if (known === undefined) merged.set(text, { ...delta });
    else {
      known.attempts += delta.attempts;
      known.replays += delta.replays;
    }
  }
  return [...merged.values()];
}
