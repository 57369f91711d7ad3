// The store the request path talks to: the replay cache in front of a KeyStore (here the in-memory
// one), and the counters of every request answered without a round trip — from the cache, or
// coalesced in this process — reaching the records, with or without a cache.
import { CachingKeyStore } from '../../src/store/caching-key-store';
import type { RecordId, StoredResponse } from '../../src/store/record';
import { ReplayCache } from '../../src/store/replay-cache';
import { MemoryKeyStore } from '../support/memory-key-store';

const ID: RecordId = { scope: 'orders', tenant: '', key: 'k-1' };
const FINGERPRINT = Buffer.alloc(32, 1);
const STORED: StoredResponse = {
  status: 201,
  headers: [['content-type', 'application/json']],
  body: Buffer.from('{"id":1}'),
  bodyOmitted: false,
  outcomeUnknown: false,
};
const claimOf = (raw?: Buffer) => ({
  id: ID,
  route: 'orders',
  fingerprint: FINGERPRINT,
  leaseMs: 5_000,
  claimExpiryMs: 3_605_000,
  raw,
});

function liveCache(): ReplayCache {
  const cache = new ReplayCache(1_000_000);
  cache.setLive(true);
  return cache;
}

test('a claim that finds a completed record admits it; its repeats are answered from memory and counted', async () => {
  const inner = new MemoryKeyStore();
  const store = new CachingKeyStore(inner, liveCache());
  inner.seed(ID, { fingerprint: FINGERPRINT, state: 'completed', response: STORED });
  expect(store.answerFromMemory(ID, FINGERPRINT)).toBeUndefined(); // not cached yet

  expect(await store.claim(claimOf())).toMatchObject({ kind: 'completed', attempts: 2 });
  expect(store.answerFromMemory(ID, FINGERPRINT)).toEqual({ kind: 'replay', response: STORED });
  expect(store.answerFromMemory(ID, Buffer.alloc(32, 2))).toEqual({ kind: 'mismatch' });
  expect(inner.calls).toEqual(['claim']);

  await store.flushAnswered();
  expect(inner.calls).toEqual(['claim', 'flushCounters']);
  expect(inner.row(ID)!.attempts).toBe(4); // the seed, the claim, the replay and the mismatch
  await store.flushAnswered(); // nothing new: no statement
  expect(inner.calls).toEqual(['claim', 'flushCounters']);
});

test('a raw fingerprint remembered with the claim finds the replay without the canonical one', async () => {
  const inner = new MemoryKeyStore();
  const store = new CachingKeyStore(inner, liveCache());
  inner.seed(ID, { fingerprint: FINGERPRINT, state: 'completed', response: STORED });
  const raw = Buffer.alloc(32, 9);
  expect(store.replayByRaw(ID, raw)).toBeUndefined();
  await store.claim(claimOf(raw));
  expect(store.replayByRaw(ID, raw)).toBe(STORED);
  expect(store.replayByRaw(ID, Buffer.alloc(32, 8))).toBeUndefined();
  await store.flushAnswered();
  expect(inner.row(ID)!.attempts).toBe(3);
});

test('without a cache every repeat claims, and coalesced answers are still counted', async () => {
  const inner = new MemoryKeyStore();
  const store = new CachingKeyStore(inner, undefined);
  inner.seed(ID, { fingerprint: FINGERPRINT, state: 'completed', response: STORED });
  await store.claim(claimOf());
  expect(store.answerFromMemory(ID, FINGERPRINT)).toBeUndefined();
  store.countAnswered(ID, true);
  store.countAnswered(ID, false);
  await store.flushAnswered();
  expect(inner.row(ID)!.attempts).toBe(4);
});

test('a failed flush is reported and loses only its own counts; stopping flushes what is pending', async () => {
  const inner = new MemoryKeyStore();
  const errors: unknown[] = [];
  const store = new CachingKeyStore(inner, undefined, (error) => errors.push(error));
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
