import { ReplayCache } from '../../src/store/replay-cache';
import { recordDigest, type StoredResponse } from '../../src/store/record';

const id = (key: string) => ({ scope: 's', tenant: '', key });
const fp = Buffer.from('fingerprint');
const response = (bytes: number): StoredResponse => ({
  status: 201,
  headers: [['content-type', 'text/plain']],
  body: Buffer.alloc(bytes, 'x'),
  bodyOmitted: false,
  outcomeUnknown: false,
});

function cache(maxBytes = 100_000, clock = { t: 0 }) {
  const c = new ReplayCache(maxBytes, () => clock.t);
  c.setLive(true);
  return { c, clock };
}

test('answers replays and mismatches', () => {
  const { c } = cache();
  c.remember(id('k1'), fp, response(10), 60_000);
  expect(c.lookup(id('k1'), fp)).toMatchObject({ kind: 'replay' });
  expect(c.lookup(id('k1'), Buffer.from('other'))).toEqual({ kind: 'mismatch' });
  expect(c.lookup(id('k2'), fp)).toBeUndefined();
});

test('is not used while not live, and forgets everything when liveness changes', () => {
  const { c } = cache();
  c.remember(id('k1'), fp, response(10), 60_000);
  c.setLive(false);
  expect(c.lookup(id('k1'), fp)).toBeUndefined();
  c.remember(id('k1'), fp, response(10), 60_000);
  c.setLive(true);
  expect(c.size).toBe(0);
});

test('expires entries a margin before the store does, and skips records about to expire', () => {
  const { c, clock } = cache();
  c.remember(id('k1'), fp, response(10), 5_000);
  clock.t = 3_999;
  expect(c.lookup(id('k1'), fp)).toBeDefined();
  clock.t = 4_000;
  expect(c.lookup(id('k1'), fp)).toBeUndefined();
  c.remember(id('k2'), fp, response(10), 900);
  expect(c.size).toBe(0);
});

test('stays within its byte budget, dropping the oldest entries, and never caches a huge body', () => {
  const { c } = cache(40_000); // an entry of 700 body bytes costs ~1.9 kB with its overhead
  for (let i = 0; i < 30; i++) c.remember(id(`k${i}`), fp, response(700), 60_000);
  expect(c.size).toBeGreaterThan(10);
  expect(c.size).toBeLessThan(30);
  expect(c.lookup(id('k29'), fp)).toBeDefined();
  expect(c.lookup(id('k0'), fp)).toBeUndefined();
  c.remember(id('huge'), fp, response(5_000), 60_000);
  expect(c.lookup(id('huge'), fp)).toBeUndefined();
});

test('evicts one record on an operator clear', () => {
  const { c } = cache();
  c.remember(id('k1'), fp, response(10), 60_000);
  c.evict(recordDigest(id('k1')));
  expect(c.lookup(id('k1'), fp)).toBeUndefined();
});

test('an eviction for another record, or for one no longer cached, changes nothing', () => {
  const { c } = cache();
  c.remember(id('k1'), fp, response(10), 60_000);
  c.evict(recordDigest(id('k2')));
  expect(c.lookup(id('k1'), fp)).toMatchObject({ kind: 'replay' });
  c.remember(id('k1'), fp, response(10), 60_000); // re-admitted: one entry, one digest
  expect(c.size).toBe(1);
  c.evict(recordDigest(id('k1')));
  expect(c.size).toBe(0);
  c.evict(recordDigest(id('k1')));
  expect(c.size).toBe(0);
});

test('keeps raw fingerprints as copies of its own, counted in its size', () => {
  // A small raw fingerprint is a slice of Node's shared buffer pool: the cache must not hold the pool.
  const raw = Buffer.from('framed request, a few hundred bytes in practice');
  const respelled = Buffer.from('the same request spelled otherwise, by its framed bytes');
  const { c } = cache(20_000);
  c.remember(id('k1'), fp, response(100), 60_000, raw);
  c.lookup(id('k1'), fp, respelled);
  const known = [Buffer.from(raw), Buffer.from(respelled)];
  raw.fill(0);
  respelled.fill(0);
  for (const bytes of known) expect(c.lookupRaw(id('k1'), bytes)).toBeDefined();
  expect(c.lookupRaw(id('k1'), raw)).toBeUndefined();
  // Raw fingerprints count: the same entries fit without one, and push the oldest out with it.
  const keptWith = (first: Buffer | undefined): boolean => {
    const { c: sized } = cache(170_000);
    sized.remember(id('first'), fp, response(10), 60_000, first);
    for (let i = 0; i < 140; i++) sized.remember(id(`k${i}`), fp, response(10), 60_000);
    return sized.lookup(id('first'), fp) !== undefined;
  };
  expect(keptWith(undefined)).toBe(true);
  expect(keptWith(Buffer.alloc(15_000, 1))).toBe(false);
});
