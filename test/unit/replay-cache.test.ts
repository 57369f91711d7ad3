// The replay cache on its own: what it answers, for how long, and everything that makes it forget
// — an operator clear, the cache switched off, a reload that changes a route's fingerprint policy —
// including a record a claim read from the database before it forgot.
import { type Admission, type Asked, ReplayCache } from '../../src/store/replay-cache';
import { memoryKey, recordDigest, type StoredResponse } from '../../src/store/record';

const EPOCH = 'policy-a';
const id = (key: string) => ({ scope: 's', tenant: '', key });
const keyOf = (key: string, epoch = EPOCH) => memoryKey(id(key), epoch);
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
  /** What a claim asked now, found completed with `expiresInMs` to live, admits. */
  const admit = (
    key: string,
    options: {
      bytes?: number;
      expiresInMs?: number;
      raw?: Buffer;
      epoch?: string;
      asked?: Asked;
    } = {},
  ): void => {
    const epoch = options.epoch ?? EPOCH;
    const record: Admission = {
      id: id(key),
      epoch,
      fingerprint: fp,
      response: response(options.bytes ?? 10),
      expiresInMs: options.expiresInMs ?? 60_000,
      raw: options.raw,
    };
    c.remember(keyOf(key, epoch), options.asked ?? c.asked(), record);
  };
  return { c, clock, admit };
}

test('answers replays and mismatches', () => {
  const { c, admit } = cache();
  admit('k1');
  expect(c.lookup(keyOf('k1'), fp)).toMatchObject({ kind: 'replay' });
  expect(c.lookup(keyOf('k1'), Buffer.from('other'))).toEqual({ kind: 'mismatch' });
  expect(c.lookup(keyOf('k2'), fp)).toBeUndefined();
});

test('is not used while not live, and forgets everything when liveness changes', () => {
  const { c, admit } = cache();
  admit('k1');
  c.setLive(false);
  expect(c.live).toBe(false);
  expect(c.lookup(keyOf('k1'), fp)).toBeUndefined();
  admit('k1');
  c.setLive(true);
  expect(c.size).toBe(0);
});

test('an entry ends no later than the database expiry, counted from before the claim was sent', () => {
  const { c, clock, admit } = cache();
  // The claim was sent at t=0; PostgreSQL ran it at t=1500 (a queue, a lock) and said 5000 ms
  // remain: the database expires the record at t=6500. Counted from the answer's arrival (t=2000)
  // the entry would outlive it; counted from the sending it ends before.
  const asked = c.asked();
  clock.t = 2_000;
  admit('k1', { expiresInMs: 5_000, asked });
  clock.t = 4_990;
  expect(c.lookup(keyOf('k1'), fp)).toBeDefined();
  clock.t = 5_000;
  expect(c.lookup(keyOf('k1'), fp)).toBeUndefined();
  // Never past asked + expiresInMs, whatever the life: the clock slack only ever shortens it.
  for (const life of [1, 999, 86_400_000]) {
    const { c: other, clock: at, admit: admitOther } = cache();
    admitOther('k', { expiresInMs: life });
    at.t = life;
    expect(other.lookup(keyOf('k'), fp)).toBeUndefined();
  }
});

test('a record whose database expiry passed before its answer arrived is not admitted', () => {
  const { c, clock, admit } = cache();
  const asked = c.asked();
  clock.t = 800;
  admit('k1', { expiresInMs: 700, asked });
  expect(c.size).toBe(0);
});

test('stays within its byte budget, dropping the oldest entries, and never caches a huge body', () => {
  const { c, admit } = cache(40_000); // an entry of 700 body bytes costs ~1.9 kB with its overhead
  for (let i = 0; i < 30; i++) admit(`k${i}`, { bytes: 700 });
  expect(c.size).toBeGreaterThan(10);
  expect(c.size).toBeLessThan(30);
  expect(c.lookup(keyOf('k29'), fp)).toBeDefined();
  expect(c.lookup(keyOf('k0'), fp)).toBeUndefined();
  admit('huge', { bytes: 5_000 });
  expect(c.lookup(keyOf('huge'), fp)).toBeUndefined();
});

test('evicts one record on an operator clear, under every fingerprint policy it was cached by', () => {
  const { c, admit } = cache();
  admit('k1');
  admit('k1', { epoch: 'policy-b' });
  admit('k2');
  c.evict(recordDigest(id('k1')));
  expect(c.lookup(keyOf('k1'), fp)).toBeUndefined();
  expect(c.lookup(keyOf('k1', 'policy-b'), fp)).toBeUndefined();
  expect(c.lookup(keyOf('k2'), fp)).toBeDefined();
  admit('k3');
  c.forget(id('k3')); // the admin API's own clear
  expect(c.lookup(keyOf('k3'), fp)).toBeUndefined();
});

test('an eviction for another record, or for one no longer cached, changes nothing', () => {
  const { c, admit } = cache();
  admit('k1');
  c.evict(recordDigest(id('k2')));
  expect(c.lookup(keyOf('k1'), fp)).toMatchObject({ kind: 'replay' });
  admit('k1'); // re-admitted: one entry, one digest
  expect(c.size).toBe(1);
  c.evict(recordDigest(id('k1')));
  expect(c.size).toBe(0);
  c.evict(recordDigest(id('k1')));
  expect(c.size).toBe(0);
});

test('a record a claim read before a clear, a switch-off or a reload is not admitted after it', () => {
  const { c, admit } = cache();
  const forgetting: ((cache: ReplayCache) => void)[] = [
    (it) => it.forget(id('k1')),
    (it) => it.evict(recordDigest(id('other'))),
    (it) => {
      it.setLive(false);
      it.setLive(true);
    },
    (it) => it.keepPolicies(new Set([EPOCH])),
  ];
  for (const forget of forgetting) {
    const asked = c.asked(); // the claim is sent …
    forget(c); // … the record is cleared (or the cache forgets) while it runs …
    admit('k1', { asked }); // … and what it read arrives
    expect(c.lookup(keyOf('k1'), fp)).toBeUndefined();
  }
  admit('k1'); // a claim sent after the clear reads the database after it
  expect(c.lookup(keyOf('k1'), fp)).toBeDefined();
});

test('a reload drops the entries of fingerprint policies no longer in force, and keeps the rest', () => {
  const { c, admit } = cache();
  admit('k1', { epoch: 'kept' });
  admit('k2', { epoch: 'changed' });
  c.keepPolicies(new Set(['kept', 'new']));
  expect(c.lookup(keyOf('k1', 'kept'), fp)).toBeDefined();
  expect(c.lookup(keyOf('k2', 'changed'), fp)).toBeUndefined();
  expect(c.size).toBe(1);
  // A request still running under the old config admits nothing for the old policy.
  admit('k3', { epoch: 'changed' });
  expect(c.lookup(keyOf('k3', 'changed'), fp)).toBeUndefined();
  admit('k3', { epoch: 'new' });
  expect(c.lookup(keyOf('k3', 'new'), fp)).toBeDefined();
});

test('keeps raw fingerprints as copies of its own, counted in its size', () => {
  // A small raw fingerprint is a slice of Node's shared buffer pool: the cache must not hold the pool.
  const raw = Buffer.from('framed request, a few hundred bytes in practice');
  const respelled = Buffer.from('the same request spelled otherwise, by its framed bytes');
  const { c, admit } = cache(20_000);
  admit('k1', { bytes: 100, raw });
  c.lookup(keyOf('k1'), fp, respelled);
  const known = [Buffer.from(raw), Buffer.from(respelled)];
  raw.fill(0);
  respelled.fill(0);
  for (const bytes of known) expect(c.lookupRaw(keyOf('k1'), bytes)).toBeDefined();
  expect(c.lookupRaw(keyOf('k1'), raw)).toBeUndefined();
  // Raw fingerprints count: the same entries fit without one, and push the oldest out with it.
  const keptWith = (first: Buffer | undefined): boolean => {
    const { c: sized, admit: admitSized } = cache(170_000);
    admitSized('first', { raw: first });
    for (let i = 0; i < 140; i++) admitSized(`k${i}`);
    return sized.lookup(keyOf('first'), fp) !== undefined;
  };
  expect(keptWith(undefined)).toBe(true);
  expect(keptWith(Buffer.alloc(15_000, 1))).toBe(false);
});
