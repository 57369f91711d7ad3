// The capture of an answer as it arrives (src/protected/stream-capture.ts): whole up to the limit,
// then not stored, but its first maxBytes kept for the partial answer of a stream that breaks off.
import { StreamCapture } from '../../src/protected/stream-capture';

const bytes = (text: string): Buffer => Buffer.from(text);

test('within the limit: the body and the prefix are everything that arrived', () => {
  const capture = new StreamCapture(10);
  expect(capture.add(bytes('abc'))).toBe(true);
  expect(capture.add(bytes('defg'))).toBe(true);
  expect(capture.body().toString()).toBe('abcdefg');
  expect(capture.prefix().toString()).toBe('abcdefg');
  expect(capture.total).toBe(7);
});

test('past the limit: no body to store, the first maxBytes kept, the rest only counted', () => {
  const capture = new StreamCapture(10);
  capture.add(bytes('abcdef'));
  expect(capture.add(bytes('ghijkl'))).toBe(false);
  expect(capture.add(bytes('mnop'))).toBe(false);
  expect(capture.whole).toBe(false);
  expect(capture.body()).toHaveLength(0);
  expect(capture.chunks).toEqual([]);
  expect(capture.prefix().toString()).toBe('abcdefghij');
  expect(capture.total).toBe(16);
});

test('the chunks before the overflow are still handed over once, the prefix stays', () => {
  const capture = new StreamCapture(4);
  capture.add(bytes('ab'));
  capture.add(bytes('cd'));
  capture.add(bytes('efgh'));
  expect(capture.takeOverflowed().map(String)).toEqual(['ab', 'cd']);
  expect(capture.takeOverflowed()).toEqual([]);
  expect(capture.prefix().toString()).toBe('abcd');
});

test('a first chunk larger than the limit: its first maxBytes', () => {
  const capture = new StreamCapture(3);
  expect(capture.add(bytes('abcdef'))).toBe(false);
  expect(capture.prefix().toString()).toBe('abc');
});
