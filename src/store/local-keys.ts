// Repeats of a key this process is already working on are answered here, in memory, instead of
// each asking PostgreSQL: a storm of 3000 retries of one key must not queue 3000 claims on one row,
// hold every pool connection and starve requests for other keys. Correctness across
// instances still comes from the row alone: the first request of a key in this process (the
// leader) claims as always, and only what the leader learnt from the store is shared.
//
//   leader:   claiming ──► forwarding (holds the claim; lease known) ──► settled
//                     └──► waiting (another instance holds it)     ──► settled
//   repeat, same fingerprint:
//     reject: claiming → wait for the claim's answer; forwarding → 409 with the lease it knows
//     wait:   joins the leader (at most maxWaitersPerKey; over it → 409) and gets its result
//     attach: as wait, but once the leader streams its answer (live-answer.ts) the repeat attaches
//             to it: what was sent so far, then the rest live
//   repeat, other fingerprint: 422 when the leader holds the claim (its row has the leader's
//     fingerprint); otherwise asks the store itself.
//
// What a leader settles with is only what any repeat would have read from the store then: the
// stored answer (complete succeeded, or the claim found it), a mismatch, the lease of a claim held
// elsewhere, the store being down, or "ask the store" (released, or anything else). The coalescing
// store (coalescing-store.ts) is the only user: to the pipeline a follower's answer is a claim's.
import { performance } from 'node:perf_hooks';
import type { LiveAnswer } from './live-answer';
import type { ClaimState, StoredResponse } from './record';

/** What a leader ends with: what any repeat would have read from the store then. */
export type LeaderResult =
  | { readonly kind: 'completed'; readonly response: StoredResponse }
  | { readonly kind: 'mismatch' }
  | { readonly kind: 'in-flight'; readonly leaseRemainingMs: number }
  | { readonly kind: 'store-down' }
  | { readonly kind: 'ask-store' };

/**
 * How a repeat is answered from what its leader knows: as the store would answer its claim, or
 * store-down, or ask-store (nothing known answers it; `lead`: try to become the leader first).
 */
export type Followed =
  | Exclude<ClaimState, { kind: 'claimed' }>
  | { readonly kind: 'store-down' }
  | { readonly kind: 'ask-store'; readonly lead: boolean };

export interface FollowOptions {
  /** The request's fingerprint; undefined while only its raw fingerprint is known. */
  readonly fingerprint: Buffer | undefined;
  /** The request's raw fingerprint (fingerprint.ts), when it has one. */
  readonly raw: Buffer | undefined;
  readonly mode: 'reject' | 'wait' | 'attach';
  /** performance.now() after which a waiter stops and answers 409. */
  readonly deadline: number;
  readonly maxWaiters: number;
  /** Resolves when the follower's client has gone. */
  readonly gone: () => Promise<'gone'>;
  /** Used when no lease is known yet (the leader is still claiming). */
  readonly leaseMs: number;
}

interface Entry {
  readonly fingerprint: Buffer;
  readonly raw: Buffer | undefined;
  phase: 'claiming' | 'forwarding' | 'waiting';
  /** performance.now() when the known lease ends; 0 while claiming. */
  leaseEndsAt: number;
  followers: number;
  /** The answer the leader streams, when its repeats may attach (onConcurrent: attach). */
  live: LiveAnswer | undefined;
  /** Wakes the followers waiting for a phase change, at each one. */
  readonly changed: Wakeups;
  readonly settled: OnceSettled<LeaderResult>;
}

export class LocalKeys {
  private readonly entries = new Map<string, Entry>();

  constructor(private readonly now: () => number = () => performance.now()) {}

  /** Becomes the leader of `text` when nobody in this process works on it; undefined otherwise. */
  lead(text: string, fingerprint: Buffer, raw?: Buffer): Leader | undefined {
    if (this.entries.has(text)) return undefined;
    const entry: Entry = {
      fingerprint,
      raw,
      phase: 'claiming',
      leaseEndsAt: 0,
      followers: 0,
      live: undefined,
      changed: new Wakeups(),
      settled: new OnceSettled(),
    };
    this.entries.set(text, entry);
    return new Leader(entry, this.now, () => {
      if (this.entries.get(text) === entry) this.entries.delete(text);
    });
  }

  /** Whether a request of this process is working on `text` right now. */
  has(text: string): boolean {
    return this.entries.has(text);
  }

  /** Keys being worked on right now (for tests and metrics). */
  get size(): number {
    return this.entries.size;
  }

  /** How a repeat of `text` is answered from what the leader knows. */
  async follow(text: string, options: FollowOptions): Promise<Followed> {
    const entry = this.entries.get(text);
    if (entry === undefined) return { kind: 'ask-store', lead: true };
    const sameRaw = options.raw !== undefined && entry.raw?.equals(options.raw) === true;
    // Without its fingerprint, a request that is not byte for byte the leader's cannot tell.
    if (!sameRaw && options.fingerprint === undefined) return { kind: 'ask-store', lead: true };
    const same = sameRaw || entry.fingerprint.equals(options.fingerprint!);
    const lease = (): number =>
      entry.leaseEndsAt === 0 ? options.leaseMs : Math.max(0, entry.leaseEndsAt - this.now());
    if (!same) {
      // Only a claim held here tells what the row's fingerprint is.
      return entry.phase === 'forwarding' ? MISMATCH : { kind: 'ask-store', lead: false };
    }
    const inFlight = (full?: boolean): Followed => ({
      kind: 'in-flight',
      fence: '',
      // Never 0: a lease over is the store's to settle, and a follower's claim holds no fence.
      leaseRemainingMs: Math.max(1, lease()),
      full,
    });
    // A lease that has ended is the store's to settle (unknown outcome, or a takeover): what this
    // process knows no longer answers for the row.
    if (entry.phase !== 'claiming' && lease() === 0) return { kind: 'ask-store', lead: false };
    if (options.mode === 'reject' && entry.phase !== 'claiming') return inFlight();
    if (entry.followers >= options.maxWaiters) return inFlight(true);
    entry.followers++;
    let timer: NodeJS.Timeout | undefined;
    try {
      const timeout = new Promise<'timeout'>((resolve) => {
        timer = setTimeout(() => resolve('timeout'), Math.max(0, options.deadline - this.now()));
      });
      for (;;) {
        const live = options.mode === 'attach' ? entry.live : undefined;
        if (live?.attachable === true) return { kind: 'attached', live };
        // reject: only the claim's answer is worth waiting for; wait: the leader's whole result;
        // attach: that, or the leader's answer starting to stream.
        const wake =
          options.mode === 'reject'
            ? Promise.race([entry.changed.promise, entry.settled.promise])
            : options.mode === 'attach'
              ? Promise.race([
                  entry.changed.promise,
                  entry.settled.promise,
                  // Only while it may still open: a settled promise would wake this loop forever.
                  live?.pending === true
                    ? live.opened.then((open) => (open ? undefined : NEVER))
                    : NEVER,
                ])
              : entry.settled.promise;
        // A client gone or a deadline passed: the claimant knows, and stops (pipeline.ts).
        const woke = await Promise.race([wake, timeout, options.gone()]);
        if (woke === 'gone' || woke === 'timeout') return inFlight();
        if (woke !== undefined) return followedOf(woke, options.mode);
        if (options.mode === 'attach') continue;
        if (entry.phase !== 'claiming')
          return lease() === 0 ? { kind: 'ask-store', lead: false } : inFlight();
      }
    } finally {
      clearTimeout(timer);
      entry.followers--;
    }
  }
}

/** The leader's handle: tells followers what it learnt, and must be settled exactly once. */
export class Leader {
  private done = false;

  constructor(
    private readonly entry: Entry,
    private readonly now: () => number,
    private readonly remove: () => void,
  ) {}

  /**
   * This process holds the claim now, for `leaseMs`; `live` is the answer it will stream, when its
   * repeats may attach to it.
   */
  forwarding(leaseMs: number, live?: LiveAnswer): void {
    if (!this.done) this.entry.live = live;
    this.move('forwarding', leaseMs);
  }

  /** Another instance holds the claim; this leader waits for it (onConcurrent: wait). */
  waiting(leaseRemainingMs: number): void {
    this.move('waiting', leaseRemainingMs);
  }

  /** Ends the leadership; later calls do nothing, so a `finally` can settle with ask-store. */
  settle(result: LeaderResult): void {
    if (this.done) return;
    this.done = true;
    this.remove();
    this.entry.settled.settle(result);
  }

  private move(phase: Entry['phase'], leaseMs: number): void {
    if (this.done) return;
    const entry = this.entry;
    entry.phase = phase;
    entry.leaseEndsAt = this.now() + leaseMs;
    entry.changed.wake();
  }
}

const MISMATCH: Followed = { kind: 'mismatch' };

/** A wake-up that never comes: an attach waiter whose leader's answer is not a stream. */
const NEVER = new Promise<never>(() => undefined);

function followedOf(result: LeaderResult, mode: FollowOptions['mode']): Followed {
  switch (result.kind) {
    case 'completed':
      return { kind: 'completed', response: result.response, expiresInMs: 0 };
    case 'mismatch':
    case 'store-down':
      return result;
    case 'in-flight':
      // A waiter keeps waiting for a claim held elsewhere, through the store like any waiter.
      if (mode !== 'reject') return { kind: 'ask-store', lead: true };
      return { kind: 'in-flight', fence: '', leaseRemainingMs: result.leaseRemainingMs };
    case 'ask-store':
      return { kind: 'ask-store', lead: true };
  }
}

// Most keys never see a repeat while their leader works, so the promises a follower waits on are
// made when the first one asks, not with each leader: a new key then pays no promise here.

/** A promise and what resolves it. */
interface Deferred<T> {
  readonly promise: Promise<T>;
  resolve(value: T): void;
}

function deferred<T>(): Deferred<T> {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((done) => (resolve = done));
  return { promise, resolve };
}

/** Wakes whoever waits now, each time: a waiter after a wake-up waits for the next one. */
class Wakeups {
  private next: Deferred<void> | undefined;

  /** Resolves at the next wake-up. */
  get promise(): Promise<void> {
    return (this.next ??= deferred()).promise;
  }

  wake(): void {
    const next = this.next;
    this.next = undefined;
    next?.resolve();
  }
}

/** One value, settled once; asked for before or after. */
class OnceSettled<T> {
  private waiting: Deferred<T> | undefined;
  private done = false;
  private value: T | undefined;

  get promise(): Promise<T> {
    if (this.done) return Promise.resolve(this.value as T);
    return (this.waiting ??= deferred()).promise;
  }

  settle(value: T): void {
    if (this.done) return;
    this.done = true;
    this.value = value;
    this.waiting?.resolve(value);
  }
}
