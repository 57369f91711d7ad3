// The serving process turns concurrent marking off unless the operator chose for themselves.
import { tuneHeapForServing } from '../../src/heap-tuning';

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
