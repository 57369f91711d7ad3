// The bench's --proxy-env: variables for the proxy process alone (glibc reads its malloc settings
// when a process starts, so an allocator setting must be in the proxy's own environment); and the
// instruction count's --heap-target, which takes only its two choices.
import { heapTargetChoiceOf, parseOptions, UsageError } from '../bench/options';

function options(argv: readonly string[]) {
  const parsed = parseOptions(argv);
  if (parsed === 'help') throw new Error('expected options, got help');
  return parsed;
}

describe('bench options: --proxy-env', () => {
  it('is empty unless given', () => {
    expect(options([]).proxyEnv).toEqual({});
  });

  it('takes NAME=VALUE pairs, repeated, the value as written (an = or nothing included)', () => {
    const parsed = options([
      '--proxy-env',
      'MALLOC_ARENA_MAX=2',
      '--proxy-env=GLIBC_TUNABLES=glibc.malloc.trim_threshold=131072',
      '--proxy-env',
      'EMPTY=',
    ]);
    expect(parsed.proxyEnv).toEqual({
      MALLOC_ARENA_MAX: '2',
      GLIBC_TUNABLES: 'glibc.malloc.trim_threshold=131072',
      EMPTY: '',
    });
  });

  it.each(['MALLOC_ARENA_MAX', '=2', '2X=1', 'A-B=1'])(
    'refuses %p with what it expects',
    (pair) => {
      expect(() => parseOptions(['--proxy-env', pair])).toThrow(UsageError);
      expect(() => parseOptions(['--proxy-env', pair])).toThrow(
        `--proxy-env expects NAME=VALUE (such as MALLOC_ARENA_MAX=2), got "${pair}"`,
      );
    },
  );
});

describe('bench:instructions --heap-target', () => {
  it.each(['off', 'shipped'] as const)('takes %p', (choice) => {
    expect(heapTargetChoiceOf(choice)).toBe(choice);
  });

  it.each(['', 'on', '48MB', 'Shipped'])('refuses %p with the two it takes', (value) => {
    expect(() => heapTargetChoiceOf(value)).toThrow(UsageError);
    expect(() => heapTargetChoiceOf(value)).toThrow(
      `--heap-target takes off or shipped, got "${value}"`,
    );
  });
});
