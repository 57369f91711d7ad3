// The store the request path talks to: every memory shortcut in front of a KeyStore (here the
// in-memory one) — the replay cache, a large body's repeat found by its bytes, one process's
// repeats of a key coalesced behind its first claimant, and the counters of every request answered
// without a round trip reaching the records.
import { performance } from 'node:perf_hooks';
import { CoalescingStore, LeaderLostStore } from '../../src/store/coalescing-store';
import {
  Claimant,
  type ClaimRequest,
  type ClaimResult,
  type CounterDelta,
  type RecordId,
  type StoredResponse,
} from '../../src/store/record';
import { ReplayCache } from '../../src/store/replay-cache';
import { MemoryKeyStore } from '../support/memory-key-store';

const ID: RecordId = { scope: 'orders', tenant: '', key: 'k-1' };
const FINGERPRINT = Buffer.alloc(32, 1);
const OTHER = Buffer.alloc(32, 2);
const STORED: StoredResponse = {
  status: 201,
  headers: [['content-type', 'application/json']],
  body: Buffer.from('{"id":1}'),
  bodyOmitted: false,
  outcomeUnknown: false,
};

/** A request's claimant; its client leaves when `leave` is called. */
function claimant(mode: 'reject' | 'wait' = 'reject', waitMs = 2_000, maxWaiters = 100) {
  let leave!: () => void;
  const gone = new Promise<void>((resolve) => (leave = resolve));
  const made = new Claimant(mode, performance.now() + waitMs, maxWaiters, () => gone);
  return Object.assign(made, { leave });
}

function claimOf(
  who: Claimant | undefined,
  options: { raw?: Buffer; fingerprint?: Buffer } = {},
): ClaimRequest {
  return {
    id: ID,
    route: 'orders',
    fingerprint: options.fingerprint ?? FINGERPRINT,
    leaseMs: 5_000,
    claimExpiryMs: 3_605_000,
    raw: options.raw,
    claimant: who,
  };
}

function liveCache(): ReplayCache {
  const cache = new ReplayCache(1_000_000);
  cache.setLive(true);
  return cache;
}

/** A memory store whose claims wait until `open()`: the window in which repeats pile up. */
class GatedStore extends MemoryKeyStore {
  private gate: Promise<void> | undefined;
  private opener: (() => void) | undefined;

  close(): void {
    this.gate = new Promise((resolve) => (this.opener = resolve));
  }

  open(): void {
    this.opener?.();
    this.gate = undefined;
  }

  override async claim(request: ClaimRequest): Promise<ClaimResult> {
    await this.gate;
    return super.claim(request);
  }
}

const settle = () => new Promise((resolve) => setImmediate(resolve));

describe('the replay cache', () => {
  test('a claim that finds a completed record admits it; its repeats are answered from memory and counted', async () => {
    const inner = new MemoryKeyStore();
    const store = new CoalescingStore(inner, liveCache());
    inner.seed(ID, { fingerprint: FINGERPRINT, state: 'completed', response: STORED });

    expect(await store.claim(claimOf(claimant()))).toMatchObject({
      kind: 'completed',
      attempts: 2,
    });
    expect(await store.claim(claimOf(claimant()))).toMatchObject({
      kind: 'completed',
      response: STORED,
      from: 'cache',
    });
    expect(await store.claim(claimOf(claimant(), { fingerprint: OTHER }))).toMatchObject({
      kind: 'mismatch',
      from: 'cache',
    });
    expect(inner.calls).toEqual(['claim']);

    await store.flushAnswered();
    expect(inner.calls).toEqual(['claim', 'flushCounters']);
    expect(inner.row(ID)!.attempts).toBe(4); // the seed, the claim, the replay and the mismatch
    await store.flushAnswered(); // nothing new: no statement
    expect(inner.calls).toEqual(['claim', 'flushCounters']);
  });

  test('a raw fingerprint remembered with the claim finds the replay without the canonical one', async () => {
    const inner = new MemoryKeyStore();
    const store = new CoalescingStore(inner, liveCache());
    inner.seed(ID, { fingerprint: FINGERPRINT, state: 'completed', response: STORED });
    const raw = Buffer.alloc(32, 9);
    await store.claim(claimOf(claimant(), { raw }));
    let read = 0;
    const byBytes: ClaimRequest = {
      ...claimOf(claimant(), { raw }),
      get fingerprint() {
        read++;
        return FINGERPRINT;
      },
    };
    expect(await store.claim(byBytes)).toMatchObject({ kind: 'completed', from: 'cache' });
    expect(read).toBe(0); // answered by the bytes: the canonical fingerprint was never computed
    await store.flushAnswered();
    expect(inner.row(ID)!.attempts).toBe(3);
  });

  test('shadow mode (no claimant) always asks the store', async () => {
    const inner = new MemoryKeyStore();
    const store = new CoalescingStore(inner, liveCache());
    inner.seed(ID, { fingerprint: FINGERPRINT, state: 'completed', response: STORED });
    await store.claim(claimOf(undefined));
    expect(await store.claim(claimOf(undefined))).toMatchObject({ kind: 'completed' });
    expect((await store.claim(claimOf(undefined))).from).toBeUndefined();
    expect(inner.calls).toEqual(['claim', 'claim', 'claim']);
  });
});

describe('repeats of a key this process is claiming', () => {
  test('wait for the first claimant and get what the store told it, in one round trip', async () => {
    const inner = new GatedStore();
    const store = new CoalescingStore(inner, undefined);
    inner.seed(ID, { fingerprint: FINGERPRINT, state: 'completed', response: STORED });
    inner.close();
    const first = claimant();
    const leading = store.claim(claimOf(first));
    const repeats = Array.from({ length: 20 }, () => store.claim(claimOf(claimant())));
    await settle();
    inner.open();
    expect(await leading).toMatchObject({ kind: 'completed', attempts: 2 });
    for (const repeat of await Promise.all(repeats))
      expect(repeat).toMatchObject({ kind: 'completed', response: STORED, from: 'leader' });
    expect(inner.calls).toEqual(['claim']);
    first.end();
    await store.flushAnswered();
    expect(inner.row(ID)!.attempts).toBe(22);
  });

  test('get 409 while the leader forwards (reject), and 422 for another fingerprint only then', async () => {
    const inner = new MemoryKeyStore();
    const store = new CoalescingStore(inner, undefined);
    const first = claimant();
    expect(await store.claim(claimOf(first))).toMatchObject({ kind: 'claimed' });
    expect(await store.claim(claimOf(claimant()))).toMatchObject({
      kind: 'in-flight',
      from: 'leader',
    });
    expect(await store.claim(claimOf(claimant(), { fingerprint: OTHER }))).toMatchObject({
      kind: 'mismatch',
      from: 'leader',
    });
    expect(inner.calls).toEqual(['claim']);
  });

  test('with another fingerprint, ask the store themselves while the leader is still claiming', async () => {
    const inner = new GatedStore();
    const store = new CoalescingStore(inner, undefined);
    inner.close();
    const leading = store.claim(claimOf(claimant()));
    const other = store.claim(claimOf(claimant(), { fingerprint: OTHER }));
    await settle();
    inner.open();
    expect(await leading).toMatchObject({ kind: 'claimed' });
    // The row is the leader's: the store itself says mismatch.
    expect(await other).toMatchObject({ kind: 'mismatch', attempts: 2 });
    expect((await other).from).toBeUndefined();
  });

  test('wait (onConcurrent: wait) for the leader’s stored answer, however long it forwards', async () => {
    const inner = new MemoryKeyStore();
    const store = new CoalescingStore(inner, undefined);
    const first = claimant('wait');
    const claimed = await store.claim(claimOf(first));
    expect(claimed.kind).toBe('claimed');
    const waiting = store.claim(claimOf(claimant('wait')));
    await settle();
    const fence = claimed.kind === 'claimed' ? claimed.fence : '';
    expect((await store.complete(ID, fence, STORED, 60_000, first)).landing).toBe('stored');
    expect(await waiting).toMatchObject({ kind: 'completed', response: STORED, from: 'leader' });
  });

  test('beyond maxWaitersPerKey are told the key is full, not made to wait', async () => {
    const inner = new MemoryKeyStore();
    const store = new CoalescingStore(inner, undefined);
    await store.claim(claimOf(claimant('wait', 2_000, 1)));
    const waiter = claimant('wait', 2_000, 1);
    const waiting = store.claim(claimOf(waiter));
    await settle();
    expect(await store.claim(claimOf(claimant('wait', 2_000, 1)))).toMatchObject({
      kind: 'in-flight',
      full: true,
    });
    waiter.leave();
    expect(await waiting).toMatchObject({ kind: 'in-flight', from: 'leader' });
    expect(waiter.clientLeft).toBe(true);
  });

  test('fail as the leader did when the store went away, without a store call of their own', async () => {
    const inner = new GatedStore();
    const store = new CoalescingStore(inner, undefined);
    inner.close();
    const leading = store.claim(claimOf(claimant()));
    const repeat = store.claim(claimOf(claimant()));
    await settle();
    inner.failWith = new Error('connection terminated');
    inner.open();
    await expect(leading).rejects.toBe(inner.failWith);
    await expect(repeat).rejects.toBeInstanceOf(LeaderLostStore);
    expect(inner.calls).toEqual(['claim']); // the leader's, which failed; the repeat made none
  });

  test('a leader that waits for a claim held elsewhere keeps its repeats waiting with it', async () => {
    const inner = new MemoryKeyStore();
    const store = new CoalescingStore(inner, undefined);
    // Another instance holds the claim.
    inner.seed(ID, { fingerprint: FINGERPRINT, state: 'in_progress', token: 'theirs' });
    const leader = claimant('wait', 5_000);
    expect(await store.claim(claimOf(leader))).toMatchObject({ kind: 'in-flight' });
    const follower = store.claim(claimOf(claimant('wait', 5_000)));
    await settle();
    expect(inner.calls).toEqual(['claim']); // the follower did not claim
    await inner.complete(ID, 'theirs', STORED, 60_000);
    // The leader claims again after its wait (as the pipeline does), and its repeat gets the answer.
    expect(await store.claim(claimOf(leader))).toMatchObject({ kind: 'completed' });
    expect(await follower).toMatchObject({ kind: 'completed', from: 'leader' });
    expect(inner.calls).toEqual(['claim', 'complete', 'claim']);
  });

  test('a leader that ends without a result sends its repeats to the store, and the key is free', async () => {
    const inner = new MemoryKeyStore();
    const store = new CoalescingStore(inner, undefined);
    const first = claimant('wait');
    const claimed = await store.claim(claimOf(first));
    const waiting = store.claim(claimOf(claimant('wait')));
    await settle();
    const fence = claimed.kind === 'claimed' ? claimed.fence : '';
    await store.release(ID, fence);
    first.end(); // e.g. the upstream was never reached: released, nothing stored
    expect(await waiting).toMatchObject({ kind: 'claimed' }); // it leads now, and claims itself
    expect(store.keysInFlight).toBe(1);
  });
});

describe('counters', () => {
  test('without a cache coalesced answers are still counted', async () => {
    const inner = new MemoryKeyStore();
    const store = new CoalescingStore(inner, undefined);
    inner.seed(ID, { fingerprint: FINGERPRINT, state: 'completed', response: STORED });
    await store.claim(claimOf(claimant()));
    store.countAnswered(ID, true);
    store.countAnswered(ID, false);
    await store.flushAnswered();
    expect(inner.row(ID)!.attempts).toBe(4);
  });

  test('counts of one record under two keys reach the store as one delta', async () => {
    // A row joined twice in one UPDATE is updated once: two deltas for it would lose one.
    const inner = new MemoryKeyStore();
    const batches: CounterDelta[][] = [];
    const flush = inner.flushCounters.bind(inner);
    inner.flushCounters = (deltas) => {
      batches.push(deltas.map((delta) => ({ ...delta })));
      return flush(deltas);
    };
    const store = new CoalescingStore(inner, undefined);
    inner.seed(ID, { fingerprint: FINGERPRINT, state: 'completed', response: STORED });
    store.countAnswered(ID, true, 'memory key under one policy');
    store.countAnswered(ID, false, 'memory key under another');
    store.countAnswered(ID, true);
    await store.flushAnswered();
    expect(batches).toEqual([[{ id: ID, attempts: 3, replays: 2 }]]);
    expect(inner.row(ID)!.attempts).toBe(4);
  });

  test('a failed flush is reported and loses only its own counts; stopping flushes what is pending', async () => {
    const inner = new MemoryKeyStore();
    const errors: unknown[] = [];
    const store = new CoalescingStore(inner, undefined, {
      onFlushError: (error) => errors.push(error),
    });
    inner.seed(ID, { fingerprint: FINGERPRINT, state: 'completed', response: STORED });
    store.countAnswered(ID, true);
    inner.failWith = new Error('connection terminated');
    await store.flushAnswered();
    expect(errors).toEqual([inner.failWith]);
    inner.failWith = undefined;

    store.startFlushing(60_000);
    store.countAnswered(ID, true);
    await store.stopFlushing();
    expect(inner.row(ID)!.attempts).toBe(2);
  });
});

/** A memory store whose claims read the row at once and answer only at `open()`: a slow reply. */
class LateAnswerStore extends MemoryKeyStore {
  private gate: Promise<void> | undefined;
  private opener: (() => void) | undefined;

  hold(): void {
    this.gate = new Promise((resolve) => (this.opener = resolve));
  }

  open(): void {
    this.opener?.();
    this.gate = undefined;
  }

  override async claim(request: ClaimRequest): Promise<ClaimResult> {
    const result = await super.claim(request);
    await this.gate;
    return result;
  }
}

describe('memory answers only what the database would', () => {
  /** Two routes of one group: `lenient` ignores a field that `strict` fingerprints. */
  const RAW = Buffer.alloc(32, 7);
  const viaRoute = (
    epoch: 'lenient' | 'strict',
    who: Claimant,
    fingerprint = epoch === 'lenient' ? FINGERPRINT : OTHER,
  ): ClaimRequest => ({
    ...claimOf(who, { raw: RAW, fingerprint }),
    route: epoch,
    fingerprintEpoch: epoch,
  });

  test('routes of a group that fingerprint differently share no cached answer', async () => {
    const inner = new MemoryKeyStore();
    const store = new CoalescingStore(inner, liveCache());
    inner.seed(ID, { fingerprint: FINGERPRINT, state: 'completed', response: STORED });
    await store.claim(viaRoute('lenient', claimant())); // admitted, with its bytes
    expect(await store.claim(viaRoute('lenient', claimant()))).toMatchObject({ from: 'cache' });
    // The same bytes through the strict route fingerprint otherwise: the database says 422.
    const strict = await store.claim(viaRoute('strict', claimant()));
    expect(strict).toMatchObject({ kind: 'mismatch' });
    expect(strict.from).toBeUndefined();
  });

  test("routes of a group that fingerprint differently do not follow each other's first request", async () => {
    const inner = new GatedStore();
    const store = new CoalescingStore(inner, undefined);
    inner.seed(ID, { fingerprint: FINGERPRINT, state: 'completed', response: STORED });
    inner.close();
    const leading = store.claim(viaRoute('lenient', claimant()));
    const other = store.claim(viaRoute('strict', claimant()));
    await settle();
    inner.open();
    expect(await leading).toMatchObject({ kind: 'completed' });
    expect(await other).toMatchObject({ kind: 'mismatch' });
    expect((await other).from).toBeUndefined();
    expect(inner.calls).toEqual(['claim', 'claim']);
  });

  test('a reload that changes the policy leaves nothing cached under the old one', async () => {
    const inner = new MemoryKeyStore();
    const cache = liveCache();
    cache.keepPolicies(new Set(['lenient']));
    const store = new CoalescingStore(inner, cache);
    inner.seed(ID, { fingerprint: FINGERPRINT, state: 'completed', response: STORED });
    await store.claim(viaRoute('lenient', claimant()));
    expect(cache.size).toBe(1);
    cache.keepPolicies(new Set(['strict'])); // the route's ignore entry removed
    expect(cache.size).toBe(0);
    expect(await store.claim(viaRoute('strict', claimant()))).toMatchObject({ kind: 'mismatch' });
  });

  test('a record cleared while a claim that read it was on its way back is not cached', async () => {
    const inner = new LateAnswerStore();
    const cache = liveCache();
    const store = new CoalescingStore(inner, cache);
    inner.seed(ID, { fingerprint: FINGERPRINT, state: 'completed', response: STORED });
    inner.hold();
    const late = store.claim(claimOf(claimant())); // reads the completed row …
    await settle();
    inner.rows.clear(); // … an operator clears it, and this instance forgets it …
    cache.forget(ID);
    inner.open(); // … then the claim's answer arrives
    expect(await late).toMatchObject({ kind: 'completed' });
    expect(cache.size).toBe(0);
    expect(await store.claim(claimOf(claimant()))).toMatchObject({ kind: 'claimed' });
  });

  test("a cached record is never replayed once the database's expiry has passed, however slow its claim's reply", async () => {
    const clock = { t: 0 };
    const inner = new LateAnswerStore(() => clock.t);
    const cache = new ReplayCache(1_000_000, () => clock.t);
    cache.setLive(true);
    const store = new CoalescingStore(inner, cache);
    inner.seed(ID, {
      fingerprint: FINGERPRINT,
      state: 'completed',
      response: STORED,
      expiresAt: 5_000,
    });
    inner.hold();
    const slow = store.claim(claimOf(claimant())); // read at t=0: 5000 ms left
    await settle();
    clock.t = 1_600; // its reply took 1.6 s (a queue, a stalled event loop)
    inner.open();
    await slow;
    clock.t = 4_900;
    expect(await store.claim(claimOf(claimant()))).toMatchObject({ from: 'cache' });
    clock.t = 5_000; // the database's expires_at: the record is absent there
    expect(await store.claim(claimOf(claimant()))).toMatchObject({ kind: 'claimed' });
  });
});
