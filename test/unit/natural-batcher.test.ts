// The natural batcher: a lone call runs at once and alone; calls that arrive while every lane is busy
// go together, up to the batch limit; results map back in order; a failed batch fails only its items.
import { NaturalBatcher } from '../../src/db/natural-batcher';

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
  const batcher = new NaturalBatcher(run, 2, 8);
  const result = batcher.submit(1);
  expect(batches.map((b) => b.items)).toEqual([[1]]);
  batches[0]!.finish();
  await expect(result).resolves.toBe('done 1');
});

test('calls beyond the busy lanes wait and go together in the next statement, up to the limit', async () => {
  const { batches, run } = controlledRun();
  const batcher = new NaturalBatcher(run, 2, 3);
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
  const batcher = new NaturalBatcher(run, 1, 8);
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
  const batcher = new NaturalBatcher(async () => ['only one'], 1, 8);
  const blocker = batcher.submit(0);
  const a = batcher.submit(1);
  const b = batcher.submit(2);
  await expect(blocker).resolves.toBe('only one');
  await expect(a).rejects.toThrow('a batch of 2 returned 1 results');
  await expect(b).rejects.toThrow('a batch of 2 returned 1 results');
});

test('refuses a batcher without lanes', () => {
  expect(() => new NaturalBatcher(async () => [], 0, 8)).toThrow('at least one lane');
});
