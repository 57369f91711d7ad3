// `serve` starts with the serving flags (a 2 × 8 MB young generation, concurrent marking off, `gc`
// defined) unless the operator chose for themselves, one choice at a time.
import { SERVING_HEAP_FLAGS, servingHeapFlags } from '../../src/heap-tuning';

test('are all the serving flags when node was given none of them', () => {
  expect(SERVING_HEAP_FLAGS).toEqual([
    '--max-semi-space-size=8',
    '--no-concurrent-marking',
    '--expose-gc',
  ]);
  expect(servingHeapFlags([], undefined)).toEqual(SERVING_HEAP_FLAGS);
  expect(servingHeapFlags(['--inspect'], '--enable-source-maps')).toEqual(SERVING_HEAP_FLAGS);
  // A flag that only starts like the marking one is not a choice about marking.
  expect(servingHeapFlags(['--concurrent-marking-max-worker-num=1'], undefined)).toEqual(
    SERVING_HEAP_FLAGS,
  );
});

test('leave out the young generation when the operator chose any heap size, anywhere', () => {
  const marking = ['--no-concurrent-marking', '--expose-gc'];
  expect(servingHeapFlags(['--max-old-space-size=512'], undefined)).toEqual(marking);
  expect(servingHeapFlags(['--max_semi_space_size=16'], undefined)).toEqual(marking);
  expect(servingHeapFlags([], '--max-heap-size=300')).toEqual(marking);
  expect(servingHeapFlags([], '--enable-source-maps --max-old-space-size=1024')).toEqual(marking);
});

test('leave out marking when the operator said anything about it, in either spelling', () => {
  const young = ['--max-semi-space-size=8', '--expose-gc'];
  expect(servingHeapFlags(['--concurrent-marking'], undefined)).toEqual(young);
  expect(servingHeapFlags(['--no-concurrent-marking'], undefined)).toEqual(young);
  expect(servingHeapFlags(['--no_concurrent_marking'], undefined)).toEqual(young);
  expect(servingHeapFlags(['--concurrent_marking=true'], undefined)).toEqual(young);
});

test('leave out --expose-gc when node was given it, in either spelling, anywhere', () => {
  const tuning = ['--max-semi-space-size=8', '--no-concurrent-marking'];
  expect(servingHeapFlags(['--expose-gc'], undefined)).toEqual(tuning);
  expect(servingHeapFlags([], '--inspect --expose_gc')).toEqual(tuning);
  expect(servingHeapFlags(['--expose-gc-as=collect'], undefined)).toEqual(SERVING_HEAP_FLAGS);
});

test('are none when the operator chose all three', () => {
  expect(
    servingHeapFlags(
      ['--concurrent-marking', '--expose-gc', '--max-old-space-size=512'],
      undefined,
    ),
  ).toEqual([]);
  expect(
    servingHeapFlags(['--no-concurrent-marking'], '--max-semi-space-size=16 --expose-gc'),
  ).toEqual([]);
});
