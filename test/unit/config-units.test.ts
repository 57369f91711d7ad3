import {
  formatDuration,
  formatSize,
  parseDurationMs,
  parseSizeBytes,
  tryParseDurationMs,
  tryParseSizeBytes,
} from '../../src/config/units';

describe('durations', () => {
  it.each([
    ['500ms', 500],
    ['30s', 30_000],
    ['10m', 600_000],
    ['24h', 86_400_000],
    ['7d', 604_800_000],
    ['0s', 0],
  ])('parses %s as %d ms', (text, ms) => {
    expect(parseDurationMs(text)).toBe(ms);
  });

  it.each(['30', '', '1.5h', '1h30m', '10 s', '10S', '-5s', '5w', 's', ' 30s'])(
    'rejects %j with the duration hint',
    (text) => {
      expect(tryParseDurationMs(text)).toBeUndefined();
      expect(() => parseDurationMs(text)).toThrow(
        `expected a duration like "30s", "10m" or "24h", got ${JSON.stringify(text)}`,
      );
    },
  );

  it('rejects a duration too large to be an exact number of milliseconds', () => {
    expect(tryParseDurationMs('99999999999999999d')).toBeUndefined();
  });

  it('prints a duration back in the largest unit that divides it evenly', () => {
    expect(formatDuration(90_000)).toBe('90s');
    expect(formatDuration(259_200_000)).toBe('3d');
    expect(formatDuration(600_000)).toBe('10m');
    expect(formatDuration(1_500)).toBe('1500ms');
    expect(formatDuration(0)).toBe('0ms');
  });
});

describe('sizes', () => {
  it.each([
    ['512b', 512],
    ['1kb', 1024],
    ['512kb', 524_288],
    ['1mb', 1_048_576],
    ['8MB', 8_388_608],
    ['1Gb', 1_073_741_824],
  ])('parses %s as %d bytes (binary units, any case)', (text, bytes) => {
    expect(parseSizeBytes(text)).toBe(bytes);
  });

  it.each(['1024', '1.5mb', '8 mb', '8m', '1tb', 'mb', ''])(
    'rejects %j with the size hint',
    (text) => {
      expect(tryParseSizeBytes(text)).toBeUndefined();
      expect(() => parseSizeBytes(text)).toThrow(
        `expected a size like "512kb" or "8mb", got ${JSON.stringify(text)}`,
      );
    },
  );

  it('prints a size back in the largest binary unit that divides it evenly', () => {
    expect(formatSize(1_048_576)).toBe('1mb');
    expect(formatSize(1_536)).toBe('1536b');
    expect(formatSize(3 * 1024)).toBe('3kb');
  });
});
