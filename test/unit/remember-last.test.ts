// rememberLast answers a repeated input from its last call, and only that input: any other input,
// even one seen before the last, is computed again.
import fc from 'fast-check';
import { rememberLast } from '../../src/remember-last';

test('a repeat of the last input is answered without computing; any other input is computed', () => {
  const computed: string[] = [];
  const upper = rememberLast((text: string) => {
    computed.push(text);
    return { text: text.toUpperCase() };
  });
  const first = upper('a');
  expect(upper('a')).toBe(first);
  expect(upper('b')).toEqual({ text: 'B' });
  expect(upper('a')).not.toBe(first);
  expect(computed).toEqual(['a', 'b', 'a']);
});

test('the first call is computed, whatever its input (undefined included)', () => {
  let calls = 0;
  const count = rememberLast((input: undefined | number) => {
    calls++;
    return input ?? -1;
  });
  expect(count(undefined)).toBe(-1);
  expect(count(undefined)).toBe(-1);
  expect(calls).toBe(1);
});

test('property: over any sequence of inputs it answers as the function does', () => {
  fc.assert(
    fc.property(fc.array(fc.integer({ min: 0, max: 3 }), { maxLength: 40 }), (inputs) => {
      const square = (n: number): number => n * n + inputs.length;
      let calls = 0;
      const remembered = rememberLast((n: number) => {
        calls++;
        return square(n);
      });
      for (const n of inputs) expect(remembered(n)).toBe(square(n));
      // Computed exactly once per run of equal inputs.
      const runs = inputs.filter((n, i) => i === 0 || inputs[i - 1] !== n).length;
      expect(calls).toBe(runs);
    }),
  );
});
