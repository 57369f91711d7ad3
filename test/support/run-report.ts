// What a test tells the person running the suite, outside its assertions. A suite that cannot run
// here (no Citus, no pgbouncer, not root) is skipped with jest's own skip, so it counts as skipped,
// never as a pass, and prints one line on stderr saying why. Figures a test measures (failover,
// storms, the demos' stories) go to a JSON file per test file, not to the console: `npm test` stays
// quiet unless something fails, and the numbers are still there to read afterwards.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/**
 * Where figures are written: TEST_REPORT_DIR, or a folder of this user's in the temp dir. Named by
 * uid: a shared /tmp holds one per user, so a run as root and a run as anybody else, one after the
 * other, never meet a folder the other made (and cannot write).
 */
export function reportDir(): string {
  if (process.env.TEST_REPORT_DIR) return process.env.TEST_REPORT_DIR;
  const user = process.getuid?.() ?? os.userInfo().username;
  return path.join(os.tmpdir(), `idempotency-proxy-test-reports-${user}`);
}

/** True when the person running the suite asked to see figures on the console (TEST_FIGURES=1). */
export function figuresWanted(): boolean {
  return Boolean(process.env.TEST_FIGURES);
}

/**
 * `describe` when nothing is missing; otherwise `describe.skip`, after one stderr line:
 * `SKIPPED <what>: <missing>`.
 */
export function describeUnless(missing: string | undefined | null | false, what: string) {
  if (!missing) return describe;
  skipNotice(what, missing);
  return describe.skip;
}

/** `test` when nothing is missing; otherwise `test.skip`, after one stderr line. */
export function testUnless(missing: string | undefined | null | false, what: string) {
  if (!missing) return test;
  skipNotice(what, missing);
  return test.skip;
}

const noticed = new Set<string>();

function skipNotice(what: string, missing: string): void {
  const line = `SKIPPED ${what}: ${missing}`;
  if (noticed.has(line)) return;
  noticed.add(line);
  // Straight to stderr: console.warn inside jest adds a stack and a "Console" block.
  process.stderr.write(`${line}\n`);
}

/**
 * Adds `figures` under `name` to this test file's report (`<reportDir()>/<file>.json`) and returns
 * the file's path. Set TEST_FIGURES=1 to print them as well.
 */
export function recordFigures(testFile: string, name: string, figures: unknown): string {
  fs.mkdirSync(reportDir(), { recursive: true });
  const file = path.join(reportDir(), `${path.basename(testFile).replace(/\.ts$/, '')}.json`);
  let report: Record<string, unknown> = {};
  try {
    report = JSON.parse(fs.readFileSync(file, 'utf8')) as Record<string, unknown>;
  } catch {
    // First figures of this run (or an unreadable file from another): start afresh.
  }
  report[name] = { at: new Date().toISOString(), figures };
  fs.writeFileSync(file, `${JSON.stringify(report, null, 2)}\n`);
  if (figuresWanted()) process.stderr.write(`${name}: ${JSON.stringify(figures)}\n`);
  return file;
}
