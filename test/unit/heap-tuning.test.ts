// The serving process turns concurrent marking off, and starts with the serving heap sizes, unless
// the operator chose for themselves.
import { SERVING_HEAP_FLAGS, servingHeapFlags, tuneHeapForServing } from '../../src/heap-tuning';

test('concurrent marking is turned off when nothing was said about it', () => {
  expect(tuneHeapForServing([])).toBe(true);
  expect(tuneHeapForServing(['--max-old-space-size=512'])).toBe(true);
  expect(tuneHeapForServing(['--concurrent-marking-max-worker-num=1'])).toBe(true);
});

test("an operator's own choice, in either spelling, is kept", () => {
  expect(tuneHeapForServing(['--concurrent-marking'])).toBe(false);
  expect(tuneHeapForServing(['--no-concurrent-marking'])).toBe(false);
  expect(tuneHeapForServing(['--no_concurrent_marking'])).toBe(false);
  expect(tuneHeapForServing(['--concurrent_marking=true'])).toBe(false);
});

describe('the heap sizes serve restarts with', () => {
  test('are the serving sizes when node was given none', () => {
    expect(servingHeapFlags([], undefined)).toEqual(SERVING_HEAP_FLAGS);
    expect(
      servingHeapFlags(['--no-concurrent-marking', '--inspect'], '--enable-source-maps'),
    ).toEqual(SERVING_HEAP_FLAGS);
  });

  test('are none when the operator chose any size, on the command line or in NODE_OPTIONS', () => {
    expect(servingHeapFlags(['--max-old-space-size=512'], undefined)).toEqual([]);
    expect(servingHeapFlags(['--max_semi_space_size=16'], undefined)).toEqual([]);
    expect(servingHeapFlags([], '--max-heap-size=300')).toEqual([]);
    expect(servingHeapFlags([], '--enable-source-maps --max-old-space-size=1024')).toEqual([]);
  });
});
