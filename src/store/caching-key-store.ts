// The store as the request path sees it: a KeyStore (PostgreSQL, or the tests' in-memory one) with
// memory in front. Completed records are answered from the replay cache (replay-cache.ts) without a
// round trip; every request answered without the store, from the cache or by a repeat joining this
// process's first request of its key (protected/local-keys.ts), is counted here and added to its
// record's `attempts` and `replays` in batches, so the audit counters stay right whichever answered.
// As in AWS Powertools' persistence layer, the cache belongs to the store, not to the state machine:
// decide.ts asks the store, and the store knows whether memory can answer.
import type {
  ClaimRequest,
  ClaimResult,
  CounterDelta,
  KeyStore,
  PeekResult,
  RecordId,
  StoredResponse,
} from './record';
import { recordText } from './record';
import type { CacheLookup, ReplayCache } from './replay-cache';

export class CachingKeyStore implements KeyStore {
  private readonly pending = new Map<string, CounterDelta>();
  private timer: NodeJS.Timeout | undefined;
  private flushing: Promise<void> = Promise.resolve();

  /** `cache` undefined (store.replayCache: 0): every repeat claims, and only coalesced ones are counted here. */
  constructor(
    private readonly store: KeyStore,
    readonly cache: ReplayCache | undefined,
    private readonly onFlushError: (error: unknown) => void = () => undefined,
  ) {}

  /**
   * A repeat of a completed record answered from memory, counted for the next flush; undefined =
   * claim. `raw`, the request's raw fingerprint when its body is large, is remembered on a replay.
   */
  answerFromMemory(id: RecordId, fingerprint: Buffer, raw?: Buffer): CacheLookup {
    const answer = this.cache?.lookup(id, fingerprint, raw);
    if (answer) this.countAnswered(id, answer.kind === 'replay');
    return answer;
  }

  /** A large body's replay found by its raw fingerprint alone (no canonical JSON), counted; or undefined. */
  replayByRaw(id: RecordId, raw: Buffer): StoredResponse | undefined {
    const response = this.cache?.lookupRaw(id, raw);
    if (response) this.countAnswered(id, true);
    return response;
  }

  /** Counts a request answered without the store into its record's attempts (and replays). */
  countAnswered(id: RecordId, replay: boolean, text = recordText(id)): void {
    let delta = this.pending.get(text);
    if (!delta) this.pending.set(text, (delta = { id, attempts: 0, replays: 0 }));
    delta.attempts++;
    if (replay) delta.replays++;
  }

  /** Claims; a completed record it finds is remembered, so its next repeat needs no round trip. */
  claim(request: ClaimRequest): Promise<ClaimResult> {
    const claimed = this.store.claim(request);
    const cache = this.cache;
    if (!cache) return claimed;
    return claimed.then((result) => {
      if (result.kind === 'completed')
        cache.remember(
          request.id,
          request.fingerprint,
          result.response,
          result.expiresInMs,
          request.raw,
        );
      return result;
    });
  }

  // Not cached on completion: most keys are never repeated; the first repeat's claim admits it.
  complete(id: RecordId, fence: string, response: StoredResponse, ttlMs: number): Promise<boolean> {
    return this.store.complete(id, fence, response, ttlMs);
  }

  release(id: RecordId, fence: string): Promise<boolean> {
    return this.store.release(id, fence);
  }

  flushCounters(deltas: readonly CounterDelta[]): Promise<void> {
    return this.store.flushCounters(deltas);
  }

  peek(id: RecordId, fingerprint: Buffer): Promise<PeekResult> {
    return this.store.peek(id, fingerprint);
  }

  takeOver(
    id: RecordId,
    fence: string,
    leaseMs: number,
    claimExpiryMs: number,
  ): Promise<string | null> {
    return this.store.takeOver(id, fence, leaseMs, claimExpiryMs);
  }

  settleUnknown(
    id: RecordId,
    fence: string,
    response: StoredResponse,
    ttlMs: number,
  ): Promise<StoredResponse | null> {
    return this.store.settleUnknown(id, fence, response, ttlMs);
  }

  /**
   * Adds what was counted so far to the records (one statement), after any flush still running.
   * Counters are an audit aid, not a guarantee: a failed flush loses its increments (onFlushError).
   */
  flushAnswered(): Promise<void> {
    this.flushing = this.flushing.then(async () => {
      if (this.pending.size === 0) return;
      const batch = [...this.pending.values()];
      this.pending.clear();
      try {
        await this.store.flushCounters(batch);
      } catch (error) {
        this.onFlushError(error);
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
}
