// The per-request log line is formatted by infoLineWriter, not by pino: the bytes must be the ones pino
// would write, in order with pino's own lines, and none may be lost when the process exits. The JSON
// logger writes to the process's stdout, so each case runs in a child process on the built code.
import { execFileSync, spawnSync } from 'node:child_process';
import path from 'node:path';

const LOGGER = path.resolve(__dirname, '../../dist/observability/logger.js');

/** Runs `body` in a child with `logger` and `write` (an infoLineWriter) in scope; returns its stdout. */
function inChild(body: string, env: Record<string, string> = {}): string[] {
  const script = `
    const { createLogger, infoLineWriter } = require(${JSON.stringify(LOGGER)});
    const logger = createLogger({ fd: 1 });
    const write = infoLineWriter(logger, 'request');
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
