// Durations and sizes as written in the config file ("30s", "8mb"), and back to text for `check`.
// A unit is always required: a bare `30` could mean seconds or milliseconds, and guessing wrong
// on a lease or a timeout is the kind of mistake nobody notices until an incident.

export const DURATION_HINT = 'expected a duration like "30s", "10m" or "24h"';
export const SIZE_HINT = 'expected a size like "512kb" or "8mb"';

/** Whole number plus unit; fractions ("1.5h") and compounds ("1h30m") are refused to keep one obvious spelling. */
export const DURATION_PATTERN = /^(\d+)(ms|s|m|h|d)$/;
/** Case-insensitive on purpose ("8MB" is as common as "8mb"); spelled out so JSON Schema keeps it. */
export const SIZE_PATTERN = /^(\d+)([bB]|[kKmMgG][bB])$/;

const MS_PER_UNIT: Readonly<Record<string, number>> = {
  ms: 1,
  s: 1000,
  m: 60 * 1000,
  h: 60 * 60 * 1000,
  d: 24 * 60 * 60 * 1000,
};

// Binary units (docs/README.md#small-rules): 1kb = 1024 bytes, 1mb = 1024kb.
const BYTES_PER_UNIT: Readonly<Record<string, number>> = {
  b: 1,
  kb: 1024,
  mb: 1024 ** 2,
  gb: 1024 ** 3,
};

/** Largest delay Node's timers accept (2^31 - 1 ms, about 24.8 days); longer ones fire at once. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** Milliseconds, or undefined when `text` is not a duration (or too large to be exact). */
export function tryParseDurationMs(text: string): number | undefined {
  const match = DURATION_PATTERN.exec(text);
  if (!match) return undefined;
  return scale(match[1]!, MS_PER_UNIT[match[2]!]!);
}

/** Bytes, or undefined when `text` is not a size (or too large to be exact). */
export function tryParseSizeBytes(text: string): number | undefined {
  const match = SIZE_PATTERN.exec(text);
  if (!match) return undefined;
  return scale(match[1]!, BYTES_PER_UNIT[match[2]!.toLowerCase()]!);
}

export function parseDurationMs(text: string): number {
  const ms = tryParseDurationMs(text);
  if (ms === undefined) throw new RangeError(`${DURATION_HINT}, got ${JSON.stringify(text)}`);
  return ms;
}

export function parseSizeBytes(text: string): number {
  const bytes = tryParseSizeBytes(text);
  if (bytes === undefined) throw new RangeError(`${SIZE_HINT}, got ${JSON.stringify(text)}`);
  return bytes;
}

/** The largest unit that divides evenly, so `check` prints "72h" as "3d" and 90s as "90s". */
export function formatDuration(ms: number): string {
  return formatWith(ms, MS_PER_UNIT, 'ms');
}

export function formatSize(bytes: number): string {
  return formatWith(bytes, BYTES_PER_UNIT, 'b');
}

function scale(digits: string, factor: number): number | undefined {
  const value = Number(digits) * factor;
  return Number.isSafeInteger(value) ? value : undefined;
}

function formatWith(value: number, units: Readonly<Record<string, number>>, base: string): string {
  if (value === 0) return `0${base}`;
  let best = base;
  for (const [unit, factor] of Object.entries(units)) {
    if (value % factor === 0 && factor > units[best]!) best = unit;
  }
  return `${value / units[best]!}${best}`;
}
