// The console's live counters: per-outcome counts in fixed buckets that forget what is older than
// the window, and read as zeros through a quiet period.
import { OutcomeRing } from '../../src/observability/outcome-ring';

test('counts outcomes per bucket, oldest first, the current bucket last', () => {
  let now = 1_000_000;
  const ring = new OutcomeRing(10_000, 3, () => now);
  ring.add('executed');
  ring.add('executed');
  now += 10_000;
  ring.add('replayed');
  const snapshot = ring.snapshot();
  expect(snapshot.bucketSeconds).toBe(10);
  expect(snapshot.buckets.map((b) => b.counts)).toEqual([{}, { executed: 2 }, { replayed: 1 }]);
  expect(snapshot.buckets.at(-1)!.start).toBe(new Date(1_010_000).toISOString());
  expect(snapshot.totals).toEqual({ executed: 2, replayed: 1 });
});

test('forgets buckets older than the window, also when a slot is reused after a quiet period', () => {
  let now = 0;
  const ring = new OutcomeRing(10_000, 3, () => now);
  ring.add('executed');
  now = 30_000; // the first bucket has left the window; its slot is the current one's
  expect(ring.snapshot().totals).toEqual({});
  ring.add('upstream_error');
  expect(ring.snapshot().buckets.map((b) => b.counts)).toEqual([{}, {}, { upstream_error: 1 }]);
  now = 1_000_000;
  expect(ring.snapshot().totals).toEqual({});
});
