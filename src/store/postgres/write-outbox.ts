// The writes that must land after a failed attempt: a completion whose client has (or will have) the
// answer, a release that lets a retry run, a claim whose reply was lost. Each is kept in memory and
// tried again, one statement per write, on whatever connection the pool gives (a broken one is not
// given again), until it lands, the row no longer carries its claim token, or its record expires.
//
//   add ──► pending ──► round: each write once, in age order ──┬─ landed ─────────────► settled
//              ▲                                               ├─ stale (token moved) ─► settled
//              │                                               ├─ refused for good ───► dropped
//              └──── jittered backoff after a round that ──────┴─ store failing: stop the round
//                    met a retryable failure
//
// A write can also be sent out of turn (sendNow): before its key is claimed again, the write this
// process holds for it goes first, so the record shows the answer this process already gave.
//
// Bounded by count and bytes: past either bound the oldest write is dropped, loudly, unless the
// owner can spill it (let its payload go to disk, pending-writes.ts): then it stays, small. A round stops
// at a retryable failure (the store is down: the rest would fail the same way, and a waiting round
// keeps the pool free for claims); a write refused for good is dropped and the round goes on, so one
// bad write never holds up the others. The backoff is the outbox's, not each write's: the writes wait
// for the same PostgreSQL.
import { performance } from 'node:perf_hooks';
import { within } from '../../timeout';

/** What an attempt found: the write is in, or the row no longer carries the claim's token. */
export type AttemptResult = 'landed' | 'stale';

export type DropReason = 'bound' | 'expired' | 'failed' | 'shutdown';

/** How a write left the outbox. */
export type Settlement =
  | { readonly kind: 'landed'; readonly attempts: number }
  | { readonly kind: 'stale'; readonly attempts: number }
  | { readonly kind: 'dropped'; readonly reason: DropReason; readonly error?: unknown };

export interface OutboxWrite<Kind extends string = string> {
  readonly kind: Kind;
  /** Which record it writes (record.ts recordText): the writes of one key are found by it. */
  readonly key: string;
  /** What it holds in memory (an answer's body and headers). */
  readonly bytes: number;
  /** performance.now() after which its record has expired and the write is given up. */
  readonly expiresAt: number;
  /** Sends the write once. Throws when the statement failed. */
  attempt(): Promise<AttemptResult>;
}

export interface OutboxOptions<W extends OutboxWrite> {
  /** Writes kept at most; past it the oldest is dropped. */
  readonly maxWrites: number;
  /** Bytes kept at most; past it the oldest writes are dropped. */
  readonly maxBytes: number;
  /** Whether a failed attempt may succeed later; a write whose attempt fails otherwise is dropped. */
  readonly retryable: (error: unknown) => boolean;
  /** The first backoff after a failed round, doubled each failed round up to maxDelayMs; jittered. */
  readonly firstDelayMs?: number;
  readonly maxDelayMs?: number;
  /** Writes sent at once in a round. */
  readonly concurrency?: number;
  /**
   * Past a bound, instead of dropping: let the write's payload go (it is kept elsewhere) and return
   * the bytes it holds now, or 'keep' when it cannot go yet (it stays, over the bound, until
   * `rebound`). Unset: the oldest write is dropped.
   */
  readonly spill?: (write: W) => number | 'keep';
  /** Each attempt after the first, counted. */
  readonly onRetry?: (write: W) => void;
  /** Every write leaving the outbox, with how. */
  readonly onSettled?: (write: W, settlement: Settlement) => void;
  /** For tests: [0, 1). */
  readonly random?: () => number;
}

interface Entry<W> {
  readonly write: W;
  /** The bytes counted for it: its own at first, fewer once spilled. */
  bytes: number;
  /** Its payload went elsewhere (spill): it no longer counts against maxWrites. */
  spilled: boolean;
  attempts: number;
  /** The attempt under way, shared by a round and a sendNow that meet on the write. */
  attempting?: Promise<AttemptResult>;
  readonly settle: (settlement: Settlement) => void;
}

const DEFAULT_FIRST_DELAY_MS = 50;
// At most a second: a completion this process holds lands soon after PostgreSQL is back, before
// most retries reach another instance (which would settle the key as an unknown outcome meanwhile).
const DEFAULT_MAX_DELAY_MS = 1_000;
const DEFAULT_CONCURRENCY = 4;
/** The longest pause between rounds while draining: shutdown has no time for the backoff's. */
const DRAIN_PAUSE_MS = 200;

export class WriteOutbox<W extends OutboxWrite> {
  /** In age order (a Map keeps insertion order): the oldest is dropped first. */
  private readonly entries = new Map<number, Entry<W>>();
  /** The pending entries of each key (most keys have none, or one). */
  private readonly byKey = new Map<string, Entry<W>[]>();
  private nextId = 0;
  private bytes = 0;
  /** Entries spilled: the count bound is on the others. */
  private spilledCount = 0;
  private running: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private failedRounds = 0;
  /** wake() was called while a round ran: the next starts at once. */
  private woken = false;
  private closed = false;

  constructor(private readonly options: OutboxOptions<W>) {
    if (!(options.maxWrites >= 1 && options.maxBytes >= 1))
      throw new Error('an outbox keeps at least one write and one byte');
  }

  /** Writes waiting to land. */
  get size(): number {
    return this.entries.size;
  }

  /** Writes waiting to land, and what they hold. */
  get pending(): { readonly writes: number; readonly bytes: number } {
    return { writes: this.entries.size, bytes: this.bytes };
  }

  /** The writes waiting to land, oldest first. */
  writes(): W[] {
    return [...this.entries.values()].map((entry) => entry.write);
  }

  /**
   * Takes a write whose first attempt failed (`attempts` made so far); resolves once it has left
   * the outbox. Never rejects. It is tried at once unless a round is backing off.
   */
  add(write: W, attempts = 1): Promise<Settlement> {
    if (this.closed) return Promise.resolve({ kind: 'dropped', reason: 'shutdown' });
    const settled = new Promise<Settlement>((resolve) => {
      const id = this.nextId++;
      const entry: Entry<W> = {
        write,
        bytes: write.bytes,
        spilled: false,
        attempts,
        settle: (settlement) => {
          if (!this.entries.delete(id)) return;
          this.unindex(entry);
          this.bytes -= entry.bytes;
          if (entry.spilled) this.spilledCount--;
          this.options.onSettled?.(write, settlement);
          resolve(settlement);
        },
      };
      this.entries.set(id, entry);
      const ofKey = this.byKey.get(write.key);
      if (ofKey) ofKey.push(entry);
      else this.byKey.set(write.key, [entry]);
      this.bytes += write.bytes;
    });
    this.enforceBounds();
    this.schedule();
    return settled;
  }

  /** Whether a write of this key (record.ts recordText) is pending. */
  holds(key: string): boolean {
    return this.entries.size > 0 && this.byKey.has(key);
  }

  /** The pending writes of one key, oldest first. */
  writesOf(key: string): W[] {
    return (this.byKey.get(key) ?? []).map((entry) => entry.write);
  }

  /**
   * Sends the pending writes of one key now, out of turn and whatever the backoff (an attempt
   * already under way is joined, not repeated). Resolves once each has left the outbox; rejects
   * with the error of an attempt that may succeed later, the write staying pending. A write refused
   * for good is dropped, as in a round.
   */
  async sendNow(key: string): Promise<void> {
    for (const entry of [...(this.byKey.get(key) ?? [])]) {
      const failure = await this.attempt(entry);
      if (failure !== undefined) throw failure;
    }
  }

  /**
   * The store answered again: a backoff under way is cut short and a round starts now, so that
   * queued writes land before the keys they hold are claimed elsewhere.
   */
  wake(): void {
    if (this.closed) return;
    // A round under way backs off when it ends unless told now.
    if (this.running) this.woken = true;
    if (this.timer === undefined) return;
    clearTimeout(this.timer);
    this.timer = undefined;
    this.failedRounds = 0;
    this.schedule();
  }

  /**
   * Tries what is pending until it has landed or `timeoutMs` has passed, without the backoff's long
   * pauses; what is left is dropped (reason shutdown) and returned. No write is taken afterwards.
   */
  async drain(timeoutMs: number): Promise<W[]> {
    const deadline = performance.now() + timeoutMs;
    this.closed = true;
    clearTimeout(this.timer);
    this.timer = undefined;
    while (this.entries.size > 0) {
      const left = deadline - performance.now();
      if (left <= 0) break;
      // An attempt that hangs (a server gone without a reset) must not hold the shutdown up.
      await within(this.running ?? this.round(), left, () => undefined);
      if (this.entries.size === 0 || this.running) continue;
      if (this.failedRounds > 0)
        await sleep(Math.min(this.delayMs(), DRAIN_PAUSE_MS, deadline - performance.now()));
    }
    const left = [...this.entries.values()];
    for (const entry of left) entry.settle({ kind: 'dropped', reason: 'shutdown' });
    return left.map((entry) => entry.write);
  }

  /** Applies the bounds again: a write that could not be spilled before may be now. */
  rebound(): void {
    this.enforceBounds();
  }

  private enforceBounds(): void {
    const { maxWrites, maxBytes, spill } = this.options;
    const over = (): boolean =>
      this.entries.size - this.spilledCount > maxWrites || this.bytes > maxBytes;
    for (const entry of this.entries.values()) {
      if (!over()) return;
      if (spill === undefined) {
        entry.settle({ kind: 'dropped', reason: 'bound' });
        continue;
      }
      if (entry.spilled) continue;
      const bytes = spill(entry.write);
      if (bytes === 'keep') continue;
      this.bytes += bytes - entry.bytes;
      entry.bytes = bytes;
      entry.spilled = true;
      this.spilledCount++;
    }
  }

  /** Starts a round now, unless one is running or the outbox is backing off. */
  private schedule(): void {
    if (this.running || this.timer || this.closed) return;
    void this.round();
  }

  private round(): Promise<void> {
    this.running = this.runRound().finally(() => {
      this.running = undefined;
      if (this.entries.size === 0 || this.closed) return;
      if (this.woken) this.failedRounds = 0;
      this.woken = false;
      if (this.failedRounds === 0) return this.schedule();
      // Backing off: a chained timer, never one per write.
      this.timer = setTimeout(() => {
        this.timer = undefined;
        this.schedule();
      }, this.delayMs());
      this.timer.unref();
    });
    return this.running;
  }

  /** Each pending write once, oldest first, `concurrency` at a time; stops at a retryable failure. */
  private async runRound(): Promise<void> {
    const queue = [...this.entries.values()];
    let failed = false;
    const next = (): Entry<W> | undefined => (failed ? undefined : queue.shift());
    const worker = async (): Promise<void> => {
      for (let entry = next(); entry; entry = next()) {
        if ((await this.attempt(entry)) !== undefined) failed = true;
      }
    };
    await Promise.all(
      Array.from({ length: this.options.concurrency ?? DEFAULT_CONCURRENCY }, worker),
    );
    this.failedRounds = failed ? this.failedRounds + 1 : 0;
  }

  /**
   * One attempt of an entry (joining one under way), settling it unless it failed in a way that may
   * succeed later: then that error is returned and the entry stays.
   */
  private async attempt(entry: Entry<W>): Promise<unknown> {
    if (performance.now() >= entry.write.expiresAt) {
      entry.settle({ kind: 'dropped', reason: 'expired' });
      return undefined;
    }
    if (entry.attempting === undefined) {
      // A write added before any attempt (a lost claim's release) is not a retry on its first.
      if (++entry.attempts > 1) this.options.onRetry?.(entry.write);
      entry.attempting = entry.write.attempt().finally(() => (entry.attempting = undefined));
    }
    try {
      entry.settle({ kind: await entry.attempting, attempts: entry.attempts });
      return undefined;
    } catch (error) {
      if (this.options.retryable(error)) return error;
      entry.settle({ kind: 'dropped', reason: 'failed', error });
      return undefined;
    }
  }

  private unindex(entry: Entry<W>): void {
    const ofKey = this.byKey.get(entry.write.key);
    if (ofKey === undefined) return;
    const at = ofKey.indexOf(entry);
    if (at >= 0) ofKey.splice(at, 1);
    if (ofKey.length === 0) this.byKey.delete(entry.write.key);
  }

  /** Full jitter over an exponential backoff: between half and all of first × 2^(failed rounds - 1). */
  private delayMs(): number {
    const first = this.options.firstDelayMs ?? DEFAULT_FIRST_DELAY_MS;
    const max = this.options.maxDelayMs ?? DEFAULT_MAX_DELAY_MS;
    const ceiling = Math.min(max, first * 2 ** Math.max(0, this.failedRounds - 1));
    const random = this.options.random ?? Math.random;
    return ceiling / 2 + (random() * ceiling) / 2;
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));
}
