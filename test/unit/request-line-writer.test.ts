// The per-request log line is formatted by infoLineWriter (and the request entry's fields by
// requestLineFields), not by pino: the bytes must be the ones pino would write, in order with pino's
// own lines, and none may be lost when the process exits. The JSON logger writes to the process's
// stdout, so each case that needs it runs in a child process on the built code.
import { execFileSync, spawnSync } from 'node:child_process';
import path from 'node:path';
import fc from 'fast-check';
import { newLogEntry, type RequestLogEntry } from '../../src/http/request-log';
import { requestLineFields } from '../../src/observability/request-line';

const LOGGER = path.resolve(__dirname, '../../dist/observability/logger.js');
const REQUEST_LINE = path.resolve(__dirname, '../../dist/observability/request-line.js');
const REQUEST_LOG = path.resolve(__dirname, '../../dist/http/request-log.js');

/** Runs `body` in a child with `logger` and `write` (an infoLineWriter) in scope; returns its stdout. */
function inChild(body: string, env: Record<string, string> = {}): string[] {
  const script = `
    const { createLogger, infoLineWriter } = require(${JSON.stringify(LOGGER)});
    const { requestLineWriter } = require(${JSON.stringify(REQUEST_LINE)});
    const { newLogEntry } = require(${JSON.stringify(REQUEST_LOG)});
    const logger = createLogger({ fd: 1 });
    const write = infoLineWriter(logger, 'request');
    const writeRequest = requestLineWriter(logger);
    ${body}
  `;
  const out = execFileSync(process.execPath, ['-e', script], {
    env: { ...process.env, LOG_FORMAT: 'json', LOG_LEVEL: 'info', ...env },
    encoding: 'utf8',
    maxBuffer: 64 * 1024 * 1024,
  });
  return out.split('\n').filter((line) => line !== '');
}

const withoutTime = (line: string): string => line.replace(/"time":"[^"]*",/, '');

const ENTRIES: Record<string, unknown>[] = [
  { route: 'refunds', method: 'POST', path: '/refunds', status: 201, totalMs: 1.25, storeMs: 0 },
  { route: undefined, key: undefined, outcome: 'not_found', status: 404, cached: undefined },
  { path: '/a"b\\c\nd\te\u0001', key: 'é€😀\u2028' },
  { attempts: 3, keyDerived: true, clientClosedEarly: false, waitMs: 0.01, big: 1e21, nan: NaN },
  { tiny: 5e-7, max: Number.MAX_VALUE, nothing: null, list: [1, 'a', null] },
  {
    nested: { a: 'b"c', d: [true] },
    quote: '"',
    slash: '\\',
    ctl: '\u001f',
    del: '\u007f',
    pair: '😀',
  },
  {},
];

test('writes exactly the line pino writes for the same fields', () => {
  const lines = inChild(`
    for (const fields of ${JSON.stringify(ENTRIES)}.map((e, i) => i === 3 ? { ...e, nan: NaN } : e)) {
      write(fields);
      logger.info(fields, 'request');
    }
  `);
  expect(lines).toHaveLength(ENTRIES.length * 2);
  for (let i = 0; i < lines.length; i += 2) {
    expect(withoutTime(lines[i]!)).toBe(withoutTime(lines[i + 1]!));
    const parsed = JSON.parse(lines[i]!) as Record<string, unknown>;
    expect(parsed).toMatchObject({ level: 30, service: 'idempotency-proxy', msg: 'request' });
    expect(new Date(parsed.time as string).toISOString()).toBe(parsed.time);
  }
  // JSON.stringify dropped the undefined fields, as pino does.
  expect(lines[2]).not.toContain('"route"');
  expect(JSON.parse(lines[4]!)).toMatchObject({ path: '/a"b\\c\nd\te\u0001', key: 'é€😀\u2028' });
});

test("writes a request entry's line exactly as pino does, fields set late in their place", () => {
  const lines = inChild(`
    const replay = newLogEntry('POST', '/refunds');
    Object.assign(replay, { route: 'refunds', key: 'k-1', outcome: 'replayed', status: 200 });
    Object.assign(replay, { totalMs: 0.42, cached: true, keyDerived: false });
    const odd = newLogEntry('PATCH', '/a"b\\\\c\\u0001é😀');
    Object.assign(odd, { streamedBytes: 10, firstByteMs: 3.5, tool: 'refund "it"' });
    Object.assign(odd, { rawTarget: '/A;*', landing: 'queued', shadow: 'would_replay' });
    Object.assign(odd, { outcomeUnknown: true, coalesced: false, clientClosedEarly: true });
    Object.assign(odd, { reconcile: 'found', attempts: 2, waitMs: NaN, storeMs: -0 });
    for (const entry of [replay, odd, replay, newLogEntry('GET', '/')]) {
      writeRequest(entry);
      logger.info(entry, 'request');
    }
  `);
  expect(lines).toHaveLength(8);
  for (let i = 0; i < lines.length; i += 2) {
    expect(withoutTime(lines[i]!)).toBe(withoutTime(lines[i + 1]!));
  }
  expect(lines[2]).toContain('"tool":"refund \\"it\\"","firstByteMs":3.5,"streamedBytes":10,');
});

test('writes what JSON cannot carry into the child as pino does too', () => {
  const lines = inChild(`
    const fields = {
      negative: -0, inf: -Infinity, fn: () => 1, sym: Symbol('s'), date: new Date(0),
      gone: { toJSON() { return undefined; } }, last: 'x',
    };
    write(fields);
    logger.info(fields, 'request');
  `);
  expect(lines).toHaveLength(2);
  expect(withoutTime(lines[0]!)).toBe(withoutTime(lines[1]!));
  expect(lines[0]).toContain(
    '"negative":0,"inf":null,"date":"1970-01-01T00:00:00.000Z","last":"x"',
  );
});

test('escapes a lone surrogate where pino would write it raw (and the line would decode to U+FFFD)', () => {
  const [line] = inChild(`write({ path: '/x\\ud800y' });`);
  expect(line).toContain('"path":"/x\\ud800y"');
  expect(JSON.parse(line!)).toMatchObject({ path: '/x\ud800y' });
});

test("keeps the order of request lines and pino's own lines", () => {
  const lines = inChild(`
    write({ n: 1 });
    write({ n: 2 });
    logger.warn({ n: 3 }, 'a warning');
    write({ n: 4 });
    logger.error({ n: 5 }, 'an error');
    setTimeout(() => { write({ n: 6 }); logger.info({ n: 7 }, 'later'); }, 300);
  `);
  expect(lines.map((line) => (JSON.parse(line) as { n: number }).n)).toEqual([1, 2, 3, 4, 5, 6, 7]);
});

test('loses no line when the process exits right after writing, in batches or not', () => {
  const lines = inChild(`
    for (let n = 0; n < 5000; n++) write({ n, path: '/refunds/' + 'x'.repeat(n % 300) });
    process.exit(0);
  `);
  expect(lines).toHaveLength(5000);
  expect(lines.map((line) => (JSON.parse(line) as { n: number }).n)).toEqual(
    Array.from({ length: 5000 }, (_, n) => n),
  );
});

test('a kill -9 after a quiet moment loses none of the lines written before it', () => {
  // Written, then 300 ms of quiet (three times the flush period), then killed without any exit hook.
  const script = `
    const { createLogger, infoLineWriter } = require(${JSON.stringify(LOGGER)});
    const write = infoLineWriter(createLogger({ fd: 1 }), 'request');
    for (let n = 0; n < 3; n++) write({ n });
    setTimeout(() => process.kill(process.pid, 'SIGKILL'), 300);
  `;
  const child = spawnSync(process.execPath, ['-e', script], {
    env: { ...process.env, LOG_FORMAT: 'json', LOG_LEVEL: 'info' },
    encoding: 'utf8',
  });
  expect(child.signal).toBe('SIGKILL');
  const lines = child.stdout.split('\n').filter((line) => line !== '');
  expect(lines.map((line) => (JSON.parse(line) as { n: number }).n)).toEqual([0, 1, 2]);
});

test('writes nothing below the logger level', () => {
  const lines = inChild(`write({ n: 1 }); logger.warn({ n: 2 }, 'shown');`, { LOG_LEVEL: 'warn' });
  expect(lines).toHaveLength(1);
  expect(JSON.parse(lines[0]!)).toMatchObject({ n: 2, msg: 'shown' });
});

describe('LOG_BACKLOG: lines waiting for the log reader are bounded', () => {
  // 20,000 request lines of ~250 bytes written in one go: the reader cannot take any of them
  // before the loop ends, so all of them wait at once (~5 MB).
  const burst = `
    for (let i = 0; i < 20000; i++) write({ route: 'refunds', n: i, path: '/refunds/' + 'x'.repeat(120) });
    setTimeout(() => {}, 400);
  `;

  test('past the bound lines are dropped, and one warning says how many', () => {
    const lines = inChild(burst, { LOG_BACKLOG: '64kb' });
    const parsed = lines.map((line) => JSON.parse(line) as Record<string, unknown>);
    const written = parsed.filter((line) => line.msg === 'request');
    const notices = parsed.filter((line) => line.droppedLines !== undefined);
    expect(notices).toHaveLength(1);
    expect(notices[0]!.level).toBe(40);
    expect(notices[0]!.msg).toContain('LOG_BACKLOG');
    const dropped = notices[0]!.droppedLines as number;
    expect(dropped).toBeGreaterThan(10_000);
    // Every line is either written whole or counted.
    expect(written.length + dropped).toBe(20_000);
    // What was written is whole lines in the order they were written: the burst's start, up to
    // about the bound, then what came once the reader had made room.
    const order = written.map((line) => line.n as number);
    expect(order).toEqual([...order].sort((a, b) => a - b));
    expect(order[0]).toBe(0);
  });

  test('under the default bound (16 MB) the same burst loses nothing', () => {
    const lines = inChild(burst);
    expect(lines).toHaveLength(20_000);
    expect(lines.some((line) => line.includes('droppedLines'))).toBe(false);
  });

  test('an unreadable LOG_BACKLOG fails like a bad LOG_LEVEL: exit 2, naming the setting', () => {
    for (const value of ['lots', '1kb']) {
      const run = spawnSync(
        process.execPath,
        ['-e', `require(${JSON.stringify(LOGGER)}).createLogger({ fd: 1 })`],
        { env: { ...process.env, LOG_BACKLOG: value }, encoding: 'utf8' },
      );
      expect(run.status).not.toBe(0);
      expect(run.stderr).toContain(`LOG_BACKLOG="${value}" is not valid`);
      expect(run.stderr).toContain('at least 64kb');
    }
  });
});

describe('requestLineFields', () => {
  // Strings with what JSON escapes (quotes, backslashes, controls, lone surrogates) and what it does
  // not (non-ASCII, U+2028, DEL): any UTF-16 code unit, and the awkward ones more often.
  const text = fc.string({
    unit: fc.oneof(
      fc.integer({ min: 0, max: 0xffff }).map((code) => String.fromCharCode(code)),
      fc.constantFrom(
        '"',
        '\\',
        '\n',
        '\u0000',
        '\u001f',
        '\u007f',
        '\ud800',
        '\udfff',
        'é',
        '😀',
        '\u2028',
      ),
      fc.constantFrom('a', '/', 'refunds', 'POST'),
    ),
    maxLength: 12,
  });
  // Values repeat across the lines of one run, as route names and labels do, so a reused value
  // is tested as well as a new one.
  const repeated = <T>(values: fc.Arbitrary<T>): fc.Arbitrary<T> =>
    fc.oneof(values, fc.constantFrom<T>(...fc.sample(values, { numRuns: 3, seed: 1 })));
  const number = fc.oneof(
    fc.double(),
    fc.integer({ min: -1000, max: 100_000 }),
    fc.constantFrom(0, -0, NaN, Infinity, -Infinity, 1e21, 5e-7, 200),
  );
  const optional = <T>(values: fc.Arbitrary<T>): fc.Arbitrary<T | undefined> =>
    fc.option(values, { nil: undefined });

  /** Every field newLogEntry creates, with what it may hold (labels as any string). */
  const FIELDS: Record<keyof RequestLogEntry, fc.Arbitrary<unknown>> = {
    route: optional(repeated(text)),
    method: repeated(text),
    path: text,
    key: optional(text),
    outcome: repeated(text),
    status: repeated(number),
    attempts: optional(repeated(number)),
    storeMs: repeated(number),
    upstreamMs: repeated(number),
    waitMs: repeated(number),
    totalMs: number,
    shadow: optional(repeated(text)),
    keyDerived: optional(fc.boolean()),
    cached: optional(fc.boolean()),
    coalesced: optional(fc.boolean()),
    outcomeUnknown: optional(fc.boolean()),
    clientClosedEarly: optional(fc.boolean()),
    landing: optional(repeated(text)),
    reconcile: optional(repeated(text)),
    rawTarget: optional(text),
    tool: optional(repeated(text)),
    firstByteMs: optional(number),
    streamedBytes: optional(number),
  };

  test('the property test sets every field newLogEntry creates', () => {
    expect(Object.keys(FIELDS).sort()).toEqual(Object.keys(newLogEntry('GET', '/')).sort());
  });

  /** An entry from newLogEntry with its fields then set in any order, as handlers set them. */
  const entry = fc
    .tuple(fc.record(FIELDS), fc.shuffledSubarray(Object.keys(FIELDS) as (keyof RequestLogEntry)[]))
    .map(([values, order]) => {
      const made = newLogEntry(values.method as string, values.path as string) as unknown as Record<
        string,
        unknown
      >;
      for (const name of order) made[name] = values[name];
      return made as unknown as RequestLogEntry;
    });

  test('writes for any entry exactly the fields JSON.stringify writes, in its order', () => {
    fc.assert(
      fc.property(fc.array(entry, { minLength: 1, maxLength: 8 }), (entries) => {
        for (const made of entries) {
          // JSON.stringify is pino's form but for a lone surrogate, which pino writes raw (above).
          expect(`{${requestLineFields(made).slice(1)}}`).toBe(JSON.stringify(made));
        }
      }),
      { numRuns: 2000 },
    );
  });
});
