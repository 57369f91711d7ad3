// The suite's own reporting: a skipped suite is jest's skip (counted as skipped, not passed) with
// one line on stderr saying why, and figures land in a JSON file per test file, merged by name.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describeUnless, recordFigures, testUnless } from '../support/run-report';

describe('run-report', () => {
  let dir: string;
  let written: string[];
  let write: jest.SpyInstance;

  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ip-report-'));
    process.env.TEST_REPORT_DIR = dir;
    delete process.env.TEST_FIGURES;
    written = [];
    write = jest.spyOn(process.stderr, 'write').mockImplementation((chunk: unknown) => {
      written.push(String(chunk));
      return true;
    });
  });

  afterEach(() => {
    write.mockRestore();
    delete process.env.TEST_REPORT_DIR;
    fs.rmSync(dir, { recursive: true, force: true });
  });

  test('nothing missing: the real describe and test, and nothing printed', () => {
    expect(describeUnless(undefined, 'x.test.ts')).toBe(describe);
    expect(testUnless(false, 'x.test.ts')).toBe(test);
    expect(written).toEqual([]);
  });

  test('something missing: jest skip, and one line naming the file and the reason, once', () => {
    expect(describeUnless('pgbouncer is not installed', 'p.test.ts: no PgBouncer')).toBe(
      describe.skip,
    );
    describeUnless('pgbouncer is not installed', 'p.test.ts: no PgBouncer');
    expect(testUnless('no chromium', 'c.test.ts')).toBe(test.skip);
    expect(written).toEqual([
      'SKIPPED p.test.ts: no PgBouncer: pgbouncer is not installed\n',
      'SKIPPED c.test.ts: no chromium\n',
    ]);
  });

  test('figures go to <dir>/<test file>.json, merged by name, printed only with TEST_FIGURES', () => {
    const file = recordFigures('/x/failover.test.ts', 'sync', { duplicates: 0 });
    recordFigures('/x/failover.test.ts', 'async', { duplicates: 24 });
    expect(file).toBe(path.join(dir, 'failover.test.json'));
    const saved = JSON.parse(fs.readFileSync(file, 'utf8')) as Record<string, { figures: unknown }>;
    expect(Object.keys(saved)).toEqual(['sync', 'async']);
    expect(saved.async!.figures).toEqual({ duplicates: 24 });
    expect(written).toEqual([]);
    process.env.TEST_FIGURES = '1';
    recordFigures('/x/failover.test.ts', 'sync', { duplicates: 1 });
    expect(written).toEqual(['sync: {"duplicates":1}\n']);
  });
});
