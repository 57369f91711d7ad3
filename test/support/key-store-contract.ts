// The KeyStore contract (src/store/record.ts): one suite of behaviour tests that every store runs —
// the in-memory one the unit tests use, PostgreSQL, Citus, and the caching decorator over each — so a
// store that answers differently from the others fails here, not in a proxy test far away.
//
// Time is the one thing the stores do not share: the in-memory store reads a clock the test moves
// on, PostgreSQL reads now(). A subject's `elapse` lets that much of its own time pass (moves the
// clock, or waits), and the contract keeps durations short where they must run out and long where
// they must not, so no assertion depends on how fast the machine is:
//
//   SHORT_MS lease/ttl ──► elapse(PAST_SHORT_MS) ──► certainly over
//   LONG_MS  lease/ttl ──────────────────────────────► certainly not over during a test
import { randomBytes } from 'node:crypto';
import type { Pool } from 'pg';
import { CoalescingStore } from '../../src/store/coalescing-store';
import {
  Claimant,
  type ClaimRequest,
  type ClaimResult,
  type KeyStore,
  type RecordId,
  type StoredResponse,
} from '../../src/store/record';
import { ReplayCache } from '../../src/store/replay-cache';
import { quoteTableName } from '../../src/db/identifier';
import { MemoryKeyStore } from './memory-key-store';
import { sleep } from './upstream';

/** A response as the store hands it back: with the record's expiry (Idempotency-Expires). */
function storedAs(response: StoredResponse): StoredResponse {
  return { ...response, expiresAt: expect.any(Number) as number };
}

export interface Counters {
  readonly attempts: number;
  readonly replays: number;
}

/** A repeat as the request path answers it: replayed, refused as a mismatch, or by its claim. */
export type Repeat =
  | { readonly kind: 'replay'; readonly response: StoredResponse }
  | { readonly kind: 'mismatch' }
  | Extract<ClaimResult, { kind: 'claimed' | 'in-flight' }>;

/** A store under the contract, with what the suite needs to observe it. */
export interface StoreSubject {
  readonly store: KeyStore;
  /** Lets `ms` of the store's own time pass. */
  elapse(ms: number): Promise<void>;
  /** The record's audit counters as stored (counts held in memory added first); undefined: no row. */
  counters(id: RecordId): Promise<Counters | undefined>;
  /** Answers a repeat as the request path does: from memory where the store has it, else by a claim. */
  repeat(request: ClaimRequest): Promise<Repeat>;
  /** Repeats answered from memory so far; undefined for a store without memory. */
  memoryAnswers?(): number;
  close?(): Promise<void>;
}

export const SHORT_MS = 40;
export const PAST_SHORT_MS = 3 * SHORT_MS;
const LONG_MS = 3_600_000;
/** Over the replay cache's expiry margin (1 s), so a decorator's cache holds the record too. */
const CACHED_TTL_MS = 1_200;
/** Ttls a minute apart: each record's own ttl is told apart from its neighbours' however slow the run. */
const TTL_STEP_MS = 60_000;

const FINGERPRINT = Buffer.alloc(32, 0xa1);
const OTHER_FINGERPRINT = Buffer.alloc(32, 0xb2);
const ALL_BYTES = Buffer.from(Array.from({ length: 256 }, (_, n) => n));

const response = (status: number, body = `answer ${status}`): StoredResponse => ({
  status,
  headers: [['content-type', 'text/plain']],
  body: Buffer.from(body),
  bodyOmitted: false,
  outcomeUnknown: false,
});

/** Responses a store must give back exactly, and the names the tests give them. */
const EXACT_RESPONSES: readonly (readonly [string, StoredResponse])[] = [
  [
    'all 256 byte values, repeated header names in order',
    {
      status: 201,
      headers: [
        ['set-cookie', 'a=1'],
        ['content-type', 'application/octet-stream'],
        ['set-cookie', 'b=2'],
        ['x-empty', ''],
        ['x-latin1', 'caf\u00e9 \u00ff'],
      ],
      body: ALL_BYTES,
      bodyOmitted: false,
      outcomeUnknown: false,
    },
  ],
  [
    'an empty body (not omitted)',
    { status: 204, headers: [], body: Buffer.alloc(0), bodyOmitted: false, outcomeUnknown: false },
  ],
  [
    'an omitted body',
    {
      status: 200,
      headers: [['content-length', '9000000']],
      body: Buffer.alloc(0),
      bodyOmitted: true,
      outcomeUnknown: false,
    },
  ],
  [
    'a 1 MiB body and an unknown outcome',
    {
      status: 599,
      headers: [['content-type', 'application/problem+json']],
      body: Buffer.concat(Array.from({ length: 4_096 }, () => ALL_BYTES)),
      bodyOmitted: false,
      outcomeUnknown: true,
    },
  ],
];

let serial = 0;
/** A key no other test (or earlier run on a shared table) has used. */
const freshKey = (): string => `k-${++serial}-${randomBytes(4).toString('hex')}`;
const idOf = (key: string, scope = 'orders', tenant = ''): RecordId => ({ scope, tenant, key });

function claimOf(
  id: RecordId,
  options: { fingerprint?: Buffer; leaseMs?: number; claimExpiryMs?: number } = {},
): ClaimRequest {
  const leaseMs = options.leaseMs ?? LONG_MS;
  return {
    id,
    route: id.scope,
    fingerprint: options.fingerprint ?? FINGERPRINT,
    leaseMs,
    claimExpiryMs: options.claimExpiryMs ?? leaseMs + LONG_MS,
  };
}

/** Runs the contract against the stores `make` builds (one per test). */
export function describeKeyStoreContract(name: string, make: () => Promise<StoreSubject>): void {
  describe(`the KeyStore contract: ${name}`, () => {
    let subject: StoreSubject;
    let store: KeyStore;

    beforeEach(async () => {
      subject = await make();
      store = subject.store;
    });
    afterEach(() => subject.close?.());

    async function claimed(request: ClaimRequest): Promise<string> {
      const result = await store.claim(request);
      if (result.kind !== 'claimed') throw new Error(`expected a claim to win, got ${result.kind}`);
      return result.fence;
    }

    /** A record claimed with a lease that is over by now (its holder looks crashed). */
    async function leaseOver(id: RecordId): Promise<string> {
      const fence = await claimed(claimOf(id, { leaseMs: SHORT_MS }));
      await subject.elapse(PAST_SHORT_MS);
      return fence;
    }

    test('the first claim of a key wins, and counts one attempt', async () => {
      const id = idOf(freshKey());
      const result = await store.claim(claimOf(id));
      expect(result).toEqual({ kind: 'claimed', fence: expect.any(String), attempts: 1 });
      expect(await subject.counters(id)).toEqual({ attempts: 1, replays: 0 });
    });

    test('a second claim while the first holds it sees it in flight, with its fence and the lease left', async () => {
      const id = idOf(freshKey());
      const fence = await claimed(claimOf(id, { leaseMs: 30_000 }));
      const second = await store.claim(claimOf(id, { leaseMs: 30_000 }));
      expect(second).toEqual({
        kind: 'in-flight',
        fence,
        leaseRemainingMs: expect.any(Number),
        attempts: 2,
      });
      const { leaseRemainingMs } = second as { leaseRemainingMs: number };
      expect(leaseRemainingMs).toBeGreaterThan(0);
      expect(leaseRemainingMs).toBeLessThanOrEqual(30_000);
    });

    test.each(EXACT_RESPONSES)(
      'a completion with the claim’s fence is stored exactly and replayed: %s',
      async (_, stored) => {
        const id = idOf(freshKey());
        const fence = await claimed(claimOf(id));
        expect((await store.complete(id, fence, stored, LONG_MS)).landing).toBe('stored');
        const repeat = await store.claim(claimOf(id));
        expect(repeat).toEqual({
          kind: 'completed',
          response: storedAs(stored),
          expiresInMs: expect.any(Number),
          attempts: 2,
        });
        const { expiresInMs } = repeat as { expiresInMs: number };
        expect(expiresInMs).toBeGreaterThan(0);
        expect(expiresInMs).toBeLessThanOrEqual(LONG_MS);
        // The request path's answers too (a decorator's from memory): the same bytes each time.
        expect(await subject.repeat(claimOf(id))).toEqual({
          kind: 'replay',
          response: storedAs(stored),
        });
        expect(await subject.repeat(claimOf(id))).toEqual({
          kind: 'replay',
          response: storedAs(stored),
        });
      },
    );

    test('an omitted body is stored as empty, whatever the completion carried', async () => {
      const id = idOf(freshKey());
      const fence = await claimed(claimOf(id));
      const omitted = { ...response(200, 'not kept'), bodyOmitted: true };
      expect((await store.complete(id, fence, omitted, LONG_MS)).landing).toBe('stored');
      expect(await store.claim(claimOf(id))).toMatchObject({
        kind: 'completed',
        response: { ...omitted, body: Buffer.alloc(0) },
      });
    });

    test('a record completes once: a second completion with the same fence is refused and changes nothing', async () => {
      const id = idOf(freshKey());
      const fence = await claimed(claimOf(id));
      expect((await store.complete(id, fence, response(201), LONG_MS)).landing).toBe('stored');
      expect((await store.complete(id, fence, response(500), LONG_MS)).landing).toBe('stale');
      expect(await store.release(id, fence)).toBe('stale');
      expect(await store.claim(claimOf(id))).toMatchObject({
        kind: 'completed',
        response: response(201),
      });
    });

    test('a completion or release of a key nobody claimed is refused and creates nothing', async () => {
      const id = idOf(freshKey());
      expect((await store.complete(id, '1', response(201), LONG_MS)).landing).toBe('stale');
      expect(await store.release(id, '1')).toBe('stale');
      expect(await store.peek(id, FINGERPRINT)).toEqual({ kind: 'absent' });
      expect(await subject.counters(id)).toBeUndefined();
    });

    test('release with the fence drops the claim: the next claim wins, with fresh counters', async () => {
      const id = idOf(freshKey());
      const fence = await claimed(claimOf(id));
      await store.claim(claimOf(id)); // a repeat in flight: attempts 2
      expect(await store.release(id, fence)).toBe('stored');
      expect(await store.peek(id, FINGERPRINT)).toEqual({ kind: 'absent' });
      expect(await store.release(id, fence)).toBe('stale');
      // A released key may be reused with another body: nothing of the first request is left.
      const again = await store.claim(claimOf(id, { fingerprint: OTHER_FINGERPRINT }));
      expect(again).toMatchObject({ kind: 'claimed', attempts: 1 });
    });

    test('a stale fence is discarded: after a takeover the former holder can neither complete nor release', async () => {
      const id = idOf(freshKey());
      const old = await leaseOver(id);
      const fence = await store.takeOver(id, old, LONG_MS, 2 * LONG_MS);
      expect(fence).not.toBeNull();
      expect(fence).not.toBe(old);
      expect((await store.complete(id, old, response(500), LONG_MS)).landing).toBe('stale');
      expect(await store.release(id, old)).toBe('stale');
      expect(await store.claim(claimOf(id))).toMatchObject({ kind: 'in-flight', fence });
      expect((await store.complete(id, fence!, response(201), LONG_MS)).landing).toBe('stored');
      expect(await subject.repeat(claimOf(id))).toEqual({
        kind: 'replay',
        response: storedAs(response(201)),
      });
    });

    test('a fence from before a release stays stale once the key is claimed again', async () => {
      // The first holder's lease ended while its upstream still ran; the request that took over was
      // released (say a 503); a new request, another body, claims the key. The first holder's late
      // answer must not become the new request's stored response.
      const id = idOf(freshKey());
      const first = await leaseOver(id);
      const second = await store.takeOver(id, first, LONG_MS, 2 * LONG_MS);
      expect(await store.release(id, second!)).toBe('stored');
      const third = await claimed(claimOf(id, { fingerprint: OTHER_FINGERPRINT }));
      expect(
        (await store.complete(id, first, response(500, 'the first body'), LONG_MS)).landing,
      ).toBe('stale');
      expect(await store.claim(claimOf(id, { fingerprint: OTHER_FINGERPRINT }))).toMatchObject({
        kind: 'in-flight',
        fence: third,
      });
      expect(
        (await store.complete(id, third, response(201, 'the third body'), LONG_MS)).landing,
      ).toBe('stored');
      expect(await subject.repeat(claimOf(id, { fingerprint: OTHER_FINGERPRINT }))).toEqual({
        kind: 'replay',
        response: storedAs(response(201, 'the third body')),
      });
    });

    test('a completed record is absent once its ttl has passed: a claim wins afresh', async () => {
      const id = idOf(freshKey());
      const fence = await claimed(claimOf(id));
      expect((await store.complete(id, fence, response(201), CACHED_TTL_MS)).landing).toBe(
        'stored',
      );
      expect(await subject.repeat(claimOf(id))).toMatchObject({ kind: 'replay' });
      expect(await subject.repeat(claimOf(id))).toMatchObject({ kind: 'replay' });
      await subject.elapse(CACHED_TTL_MS + SHORT_MS);
      expect(await store.peek(id, FINGERPRINT)).toEqual({ kind: 'absent' });
      expect(await subject.repeat(claimOf(id))).toMatchObject({ kind: 'claimed', attempts: 1 });
      expect(await subject.counters(id)).toEqual({ attempts: 1, replays: 0 });
    });

    test('an in-progress record lives until claimExpiryMs; claimed again after it, the former holder is fenced out', async () => {
      const id = idOf(freshKey());
      const old = await claimed(claimOf(id, { leaseMs: SHORT_MS, claimExpiryMs: SHORT_MS }));
      await subject.elapse(PAST_SHORT_MS);
      expect(await store.peek(id, FINGERPRINT)).toEqual({ kind: 'absent' });
      const fence = await claimed(claimOf(id));
      expect(fence).not.toBe(old);
      expect((await store.complete(id, old, response(500), LONG_MS)).landing).toBe('stale');
      expect(await store.takeOver(id, old, LONG_MS, LONG_MS)).toBeNull();
      expect((await store.complete(id, fence, response(201), LONG_MS)).landing).toBe('stored');
    });

    test('nobody takes over or settles while the lease lasts', async () => {
      const id = idOf(freshKey());
      const fence = await claimed(claimOf(id));
      expect(await store.takeOver(id, fence, LONG_MS, LONG_MS)).toBeNull();
      expect(await store.settleUnknown(id, fence, response(502), LONG_MS)).toBeNull();
      expect(await store.claim(claimOf(id))).toMatchObject({ kind: 'in-flight', fence });
    });

    test('once the lease ended the claim says so, and of many takeovers at once exactly one wins', async () => {
      const id = idOf(freshKey());
      const old = await leaseOver(id);
      expect(await store.claim(claimOf(id))).toMatchObject({
        kind: 'in-flight',
        fence: old,
        leaseRemainingMs: 0,
      });
      const fences = await Promise.all(
        Array.from({ length: 8 }, () => store.takeOver(id, old, LONG_MS, LONG_MS)),
      );
      const winners = fences.filter((fence) => fence !== null);
      expect(winners).toHaveLength(1);
      expect(await store.claim(claimOf(id))).toMatchObject({
        kind: 'in-flight',
        fence: winners[0],
        leaseRemainingMs: expect.any(Number),
      });
      expect(await store.peek(id, FINGERPRINT)).toMatchObject({ kind: 'in-flight' });
      expect(await store.takeOver(id, old, LONG_MS, LONG_MS)).toBeNull();
    });

    test('a takeover extends the record’s life to its claimExpiryMs', async () => {
      const id = idOf(freshKey());
      const old = await claimed(
        claimOf(id, { leaseMs: SHORT_MS, claimExpiryMs: SHORT_MS + PAST_SHORT_MS }),
      );
      await subject.elapse(PAST_SHORT_MS);
      const fence = await store.takeOver(id, old, LONG_MS, LONG_MS);
      expect(fence).not.toBeNull();
      await subject.elapse(PAST_SHORT_MS); // past the claim's own expiry
      expect(await store.claim(claimOf(id))).toMatchObject({ kind: 'in-flight', fence });
    });

    const unknownOutcome = {
      ...response(502, '{"code":"IDEMPOTENCY_OUTCOME_UNKNOWN"}'),
      outcomeUnknown: true,
    };

    test('an unknown outcome settled after the lease ended is stored, replayed, counted, and fences out the holder', async () => {
      const id = idOf(freshKey());
      const old = await leaseOver(id);
      const settled = await store.settleUnknown(id, old, unknownOutcome, LONG_MS);
      expect(settled).toEqual(storedAs(unknownOutcome));
      expect(await store.settleUnknown(id, old, unknownOutcome, LONG_MS)).toBeNull();
      expect(await store.takeOver(id, old, LONG_MS, LONG_MS)).toBeNull();
      // An unknown outcome of the holder's own says no more: it replaces nothing.
      expect((await store.complete(id, old, unknownOutcome, LONG_MS)).landing).toBe('stale');
      expect(await subject.repeat(claimOf(id))).toEqual({ kind: 'replay', response: settled });
      // The request that settled gets the stored answer, as the repeat does: two replays.
      expect(await subject.counters(id)).toEqual({ attempts: 2, replays: 2 });
    });

    test("the holder's answer, landing after its lease was settled as an unknown outcome, replaces it once", async () => {
      const id = idOf(freshKey());
      const old = await leaseOver(id);
      await store.settleUnknown(id, old, unknownOutcome, LONG_MS);
      const real = response(201, '{"refund":"r_1"}');
      expect((await store.complete(id, old, real, LONG_MS)).landing).toBe('stored');
      expect(await subject.repeat(claimOf(id))).toEqual({
        kind: 'replay',
        response: storedAs(real),
      });
      // Once replaced, the record is the answer's: nothing replaces it again.
      expect((await store.complete(id, old, response(200), LONG_MS)).landing).toBe('stale');
      expect(await subject.repeat(claimOf(id))).toEqual({
        kind: 'replay',
        response: storedAs(real),
      });
    });

    test('only the claim whose lease it was replaces an unknown outcome', async () => {
      const id = idOf(freshKey());
      const old = await leaseOver(id);
      await store.settleUnknown(id, old, unknownOutcome, LONG_MS);
      expect((await store.complete(id, 'another-token', response(201), LONG_MS)).landing).toBe(
        'stale',
      );
      expect(await subject.repeat(claimOf(id))).toMatchObject({
        kind: 'replay',
        response: { status: 502, outcomeUnknown: true },
      });
    });

    test('another fingerprint with the key is a mismatch, in progress or completed, and changes nothing', async () => {
      const id = idOf(freshKey());
      const fence = await claimed(claimOf(id));
      const other = claimOf(id, { fingerprint: OTHER_FINGERPRINT });
      expect(await store.claim(other)).toEqual({ kind: 'mismatch', attempts: 2 });
      expect(await store.peek(id, OTHER_FINGERPRINT)).toEqual({ kind: 'mismatch' });
      expect((await store.complete(id, fence, response(201), LONG_MS)).landing).toBe('stored');
      expect(await store.claim(other)).toEqual({ kind: 'mismatch', attempts: 3 });
      expect(await subject.repeat(other)).toEqual({ kind: 'mismatch' });
      expect(await subject.repeat(other)).toEqual({ kind: 'mismatch' });
      expect(await store.peek(id, OTHER_FINGERPRINT)).toEqual({ kind: 'mismatch' });
      expect(await subject.repeat(claimOf(id))).toEqual({
        kind: 'replay',
        response: storedAs(response(201)),
      });
      expect(await subject.counters(id)).toEqual({ attempts: 6, replays: 1 });
    });

    test('peek tells a waiter the state without counting an attempt', async () => {
      const id = idOf(freshKey());
      expect(await store.peek(id, FINGERPRINT)).toEqual({ kind: 'absent' });
      const fence = await claimed(claimOf(id, { leaseMs: 30_000 }));
      const inFlight = await store.peek(id, FINGERPRINT);
      expect(inFlight).toEqual({ kind: 'in-flight', leaseRemainingMs: expect.any(Number) });
      const { leaseRemainingMs } = inFlight as { leaseRemainingMs: number };
      expect(leaseRemainingMs).toBeGreaterThan(0);
      expect(leaseRemainingMs).toBeLessThanOrEqual(30_000);
      expect((await store.complete(id, fence, response(201), LONG_MS)).landing).toBe('stored');
      expect(await store.peek(id, FINGERPRINT)).toEqual({ kind: 'completed' });
      expect(await store.peek(id, OTHER_FINGERPRINT)).toEqual({ kind: 'mismatch' });
      expect(await subject.counters(id)).toEqual({ attempts: 1, replays: 0 });
    });

    test('a lease that ended reads as 0 left to a waiter', async () => {
      const id = idOf(freshKey());
      await leaseOver(id);
      expect(await store.peek(id, FINGERPRINT)).toEqual({ kind: 'in-flight', leaseRemainingMs: 0 });
    });

    test('scopes and tenants never meet: one key in each is its own record', async () => {
      const key = freshKey();
      const ids = [idOf(key, 'orders'), idOf(key, 'refunds'), idOf(key, 'orders', 'a'.repeat(64))];
      ids.push(idOf(key, 'orders', 'b'.repeat(64)));
      const fences = await Promise.all(ids.map((id) => claimed(claimOf(id))));
      expect((await store.complete(ids[0]!, fences[0]!, response(201), LONG_MS)).landing).toBe(
        'stored',
      );
      expect(await store.release(ids[1]!, fences[1]!)).toBe('stored');
      expect(await subject.repeat(claimOf(ids[0]!))).toEqual({
        kind: 'replay',
        response: storedAs(response(201)),
      });
      expect(await store.claim(claimOf(ids[1]!))).toMatchObject({ kind: 'claimed', attempts: 1 });
      expect(await store.claim(claimOf(ids[2]!))).toMatchObject({ kind: 'in-flight', attempts: 2 });
      expect(await store.peek(idOf(key, 'payments'), FINGERPRINT)).toEqual({ kind: 'absent' });
      expect(await subject.counters(ids[0]!)).toEqual({ attempts: 2, replays: 1 });
      expect(await subject.counters(ids[1]!)).toEqual({ attempts: 1, replays: 0 });
    });

    test('attempts and replays count every request, whichever part of the store answered it', async () => {
      const id = idOf(freshKey());
      const fence = await claimed(claimOf(id));
      expect((await store.complete(id, fence, response(201), LONG_MS)).landing).toBe('stored');
      const repeats = [
        ...Array.from({ length: 5 }, () => claimOf(id)),
        ...Array.from({ length: 2 }, () => claimOf(id, { fingerprint: OTHER_FINGERPRINT })),
      ];
      for (const request of repeats) await subject.repeat(request);
      expect(await subject.counters(id)).toEqual({ attempts: 8, replays: 5 });
      // A decorator must have answered some of them itself, or this proved nothing about it.
      if (subject.memoryAnswers) expect(subject.memoryAnswers()).toBeGreaterThan(0);
    });

    test('counts from elsewhere are added to completed records only', async () => {
      const done = idOf(freshKey());
      const running = idOf(freshKey());
      const absent = idOf(freshKey());
      expect(
        (await store.complete(done, await claimed(claimOf(done)), response(201), LONG_MS)).landing,
      ).toBe('stored');
      await claimed(claimOf(running));
      await store.flushCounters([
        { id: done, attempts: 3, replays: 2 },
        { id: running, attempts: 4, replays: 4 },
        { id: absent, attempts: 1, replays: 1 },
      ]);
      await store.flushCounters([]);
      expect(await subject.counters(done)).toEqual({ attempts: 4, replays: 2 });
      expect(await subject.counters(running)).toEqual({ attempts: 1, replays: 0 });
      expect(await subject.counters(absent)).toBeUndefined();
    });

    test('of many claims of one key at once exactly one wins; every one is counted', async () => {
      const id = idOf(freshKey());
      const n = 32;
      const results = await Promise.all(Array.from({ length: n }, () => store.claim(claimOf(id))));
      const winners = results.filter((result) => result.kind === 'claimed');
      expect(winners).toHaveLength(1);
      const fence = (winners[0] as { fence: string }).fence;
      for (const result of results.filter((r) => r.kind !== 'claimed'))
        expect(result).toMatchObject({ kind: 'in-flight', fence });
      const attempts = results.map((result) => result.attempts).sort((a, b) => a - b);
      expect(attempts).toEqual(Array.from({ length: n }, (_, k) => k + 1));
    });

    test('claims and completions of many keys at once each get their own answer', async () => {
      const ids = Array.from({ length: 24 }, () => idOf(freshKey()));
      const fences = await Promise.all(ids.map((id) => claimed(claimOf(id))));
      const done = await Promise.all(
        ids.map((id, n) =>
          store.complete(id, fences[n]!, response(200 + n), TTL_STEP_MS * (n + 1)),
        ),
      );
      expect(done.map(({ landing }) => landing)).toEqual(ids.map(() => 'stored'));
      const repeats = await Promise.all(ids.map((id) => store.claim(claimOf(id))));
      repeats.forEach((repeat, n) => {
        expect(repeat).toMatchObject({ kind: 'completed', response: response(200 + n) });
        // Every delivery tells one expiry: the repeat reads the one the completion returned.
        const { expiresAt } = (repeat as { response: { expiresAt: number } }).response;
        expect(expiresAt).toBe(done[n]!.expiresAt);
        const { expiresInMs } = repeat as { expiresInMs: number };
        expect(expiresInMs).toBeGreaterThan(TTL_STEP_MS * n);
        expect(expiresInMs).toBeLessThanOrEqual(TTL_STEP_MS * (n + 1));
      });
    });
  });
}

/** A repeat's claim, as the request path reads it. */
function repeatOf(result: ClaimResult): Repeat {
  if (result.kind === 'completed') return { kind: 'replay', response: result.response };
  if (result.kind === 'mismatch') return { kind: 'mismatch' };
  if (result.kind === 'attached') throw new Error('a key store never attaches: only memory does');
  return result;
}

/** The in-memory store on a clock the test moves on. */
export function memorySubject(): StoreSubject & { readonly now: () => number } {
  let clock = 1_000_000;
  const now = (): number => clock;
  const store = new MemoryKeyStore(now);
  return {
    store,
    now,
    elapse: async (ms) => void (clock += ms),
    counters: async (id) => {
      const row = store.row(id);
      return row && { attempts: row.attempts, replays: row.replays };
    },
    repeat: async (request) => repeatOf(await store.claim(request)),
  };
}

/** PostgresKeyStore (or anything over its table) on PostgreSQL's clock. */
export function postgresSubject(store: KeyStore, pool: Pool, table: string): StoreSubject {
  return {
    store,
    elapse: sleep,
    counters: async ({ scope, tenant, key }) => {
      const { rows } = await pool.query<Counters>(
        `SELECT attempts, replays FROM ${quoteTableName(table)}
          WHERE scope = $1::text AND tenant = $2::text AND key = $3::text`,
        [scope, tenant, key],
      );
      return rows[0];
    },
    repeat: async (request) => repeatOf(await store.claim(request)),
  };
}

/**
 * The coalescing decorator over `inner`, with a live replay cache on `now` (the inner store's clock
 * where it has one): repeats go to memory first, as the pipeline's claims do, and the counts of
 * those it answered reach the records when the counters are read.
 */
export function coalescingSubject(inner: StoreSubject, now?: () => number): StoreSubject {
  const cache = new ReplayCache(64 * 1024 * 1024, now);
  cache.setLive(true);
  const store = new CoalescingStore(inner.store, cache, {
    onFlushError: (error) => {
      throw error;
    },
  });
  let fromMemory = 0;
  return {
    store,
    elapse: (ms) => inner.elapse(ms),
    counters: async (id) => {
      await store.flushAnswered();
      return inner.counters(id);
    },
    repeat: async (request) => {
      // One request's claim, ended as a request ends it, so nothing is left leading the key.
      const claimant = new Claimant('reject', 0, 100, () => new Promise(() => undefined));
      try {
        const result = await store.claim({ ...request, claimant });
        if (result.from !== undefined) fromMemory++;
        return repeatOf(result);
      } finally {
        claimant.end();
      }
    },
    memoryAnswers: () => fromMemory,
    close: () => store.stopFlushing(),
  };
}
