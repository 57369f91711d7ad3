// The natural batcher: a lone call runs at once and alone; calls that arrive while every lane is busy
// go together, up to the batch limit; results map back in order; a failed batch fails only its items.
import { NaturalBatcher } from '../../src/store/postgres/natural-batcher';

/** A run function whose statements finish only when the test says so. */
function controlledRun() {
  const batches: { items: readonly number[]; finish: (error?: Error) => void }[] = [];
  const run = (items: readonly number[]): Promise<readonly string[]> =>
    new Promise((resolve, reject) => {
      batches.push({
        items,
        finish: (error) => (error ? reject(error) : resolve(items.map((n) => `done ${n}`))),
      });
    });
  return { batches, run };
}

const tick = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

test('a lone call runs at once, in a batch of its own', async () => {
  const { batches, run } = controlledRun();
  const batcher = new NaturalBatcher(run, { lanes: 2, maxBatch: 8 });
  const result = batcher.submit(1);
  expect(batches.map((b) => b.items)).toEqual([[1]]);
  batches[0]!.finish();
  await expect(result).resolves.toBe('done 1');
});

test('calls beyond the busy lanes wait and go together in the next statement, up to the limit', async () => {
  const { batches, run } = controlledRun();
  const batcher = new NaturalBatcher(run, { lanes: 2, maxBatch: 3 });
  const results = [1, 2, 3, 4, 5, 6, 7].map((n) => batcher.submit(n));
  // Two lanes: 1 and 2 run alone; 3..7 wait.
  expect(batches.map((b) => b.items)).toEqual([[1], [2]]);
  batches[0]!.finish();
  await tick();
  expect(batches.map((b) => b.items)).toEqual([[1], [2], [3, 4, 5]]);
  batches[1]!.finish();
  await tick();
  expect(batches.map((b) => b.items)).toEqual([[1], [2], [3, 4, 5], [6, 7]]);
  batches[2]!.finish();
  batches[3]!.finish();
  await expect(Promise.all(results)).resolves.toEqual(
    [1, 2, 3, 4, 5, 6, 7].map((n) => `done ${n}`),
  );
  expect(batcher.stats()).toEqual({ batches: 4, items: 7, largest: 3 });
});

test('a failed statement fails its own items only, and the next batch still runs', async () => {
  const { batches, run } = controlledRun();
  const batcher = new NaturalBatcher(run, { lanes: 1, maxBatch: 8 });
  const first = batcher.submit(1);
  const second = batcher.submit(2);
  const third = batcher.submit(3);
  batches[0]!.finish(new Error('connection lost'));
  await expect(first).rejects.toThrow('connection lost');
  await tick();
  expect(batches[1]!.items).toEqual([2, 3]);
  batches[1]!.finish();
  await expect(Promise.all([second, third])).resolves.toEqual(['done 2', 'done 3']);
});

test('a statement that returns the wrong number of results fails its items rather than misanswer them', async () => {
  const batcher = new NaturalBatcher(async () => ['only one'], { lanes: 1, maxBatch: 8 });
  const blocker = batcher.submit(0);
  const a = batcher.submit(1);
  const b = batcher.submit(2);
  await expect(blocker).resolves.toBe('only one');
  await expect(a).rejects.toThrow('a batch of 2 returned 1 results');
  await expect(b).rejects.toThrow('a batch of 2 returned 1 results');
});

test('refuses a batcher without lanes', () => {
  expect(() => new NaturalBatcher(async () => [], { lanes: 0, maxBatch: 8 })).toThrow(
    'at least one lane',
  );
});

test('calls with a key already queued or running never share its statement: they run alone, at once', async () => {
  const { batches, run } = controlledRun();
  const batcher = new NaturalBatcher(run, { lanes: 1, maxBatch: 8, keyOf: (n) => `k${n % 10}` });
  const first = batcher.submit(1); // runs at once
  const same = batcher.submit(11); // key k1 is running: alone, beside it
  const other = batcher.submit(2); // waits for the lane
  const sameAsWaiting = batcher.submit(12); // key k2 is queued: alone too
  expect(batches.map((b) => b.items)).toEqual([[1], [11], [12]]);
  for (const batch of batches) batch.finish();
  await tick();
  expect(batches.map((b) => b.items)).toEqual([[1], [11], [12], [2]]);
  batches[3]!.finish();
  await expect(Promise.all([first, same, other, sameAsWaiting])).resolves.toEqual([
    'done 1',
    'done 11',
    'done 2',
    'done 12',
  ]);
  // Once settled, a key may batch again.
  const again = batcher.submit(21);
  expect(batches.at(-1)!.items).toEqual([21]);
  batches.at(-1)!.finish();
  await expect(again).resolves.toBe('done 21');
});

test('a batch that fails with a retryable error is retried one call per statement', async () => {
  const seen: (readonly number[])[] = [];
  let failFirst = true;
  const batcher = new NaturalBatcher(
    async (items: readonly number[]) => {
      seen.push(items);
      if (items.length > 1 && failFirst) {
        failFirst = false;
        throw Object.assign(new Error('deadlock detected'), { code: '40P01' });
      }
      await new Promise((resolve) => setTimeout(resolve, 5));
      return items.map((n) => n * 10);
    },
    { lanes: 1, maxBatch: 8, retryAlone: (error) => (error as { code?: string }).code === '40P01' },
  );
  const results = await Promise.all([1, 2, 3].map((n) => batcher.submit(n)));
  expect(results).toEqual([10, 20, 30]);
  expect(seen).toEqual([[1], [2, 3], [2], [3]]);
});

test('a batch that fails with any other error is not retried', async () => {
  let statements = 0;
  const batcher = new NaturalBatcher(
    async (items: readonly number[]) => {
      statements++;
      await new Promise((resolve) => setTimeout(resolve, 5));
      if (items.length > 1) throw new Error('connection lost');
      return items;
    },
    { lanes: 1, maxBatch: 8, retryAlone: () => false },
  );
  const results = await Promise.allSettled([1, 2, 3].map((n) => batcher.submit(n)));
  expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'rejected']);
  expect(statements).toBe(2);
});

test('with groups, a free lane takes the oldest waiting call and the waiting calls of its group only', async () => {
  const { batches, run } = controlledRun();
  // Even and odd numbers are two groups (two shards).
  const batcher = new NaturalBatcher(run, { lanes: 1, maxBatch: 3, groupOf: (n) => n % 2 });
  const results = [0, 1, 3, 2, 5, 4, 7, 9].map((n) => batcher.submit(n));
  expect(batches.map((b) => b.items)).toEqual([[0]]);
  batches[0]!.finish();
  await tick();
  // 1 waited longest: its group, in arrival order, up to the limit; 9 waits for the next lane.
  expect(batches[1]!.items).toEqual([1, 3, 5]);
  batches[1]!.finish();
  await tick();
  expect(batches[2]!.items).toEqual([2, 4]);
  batches[2]!.finish();
  await tick();
  expect(batches[3]!.items).toEqual([7, 9]);
  batches[3]!.finish();
  await expect(Promise.all(results)).resolves.toEqual(
    [0, 1, 3, 2, 5, 4, 7, 9].map((n) => `done ${n}`),
  );
  expect(batcher.stats()).toEqual({ batches: 4, items: 8, largest: 3 });
});
