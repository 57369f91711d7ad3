// For the spool's tests: temp folders removed after the test file, entries that say which they are,
// and other processes that hold or write a spool (the built module in dist/, which the jest global
// setup builds), killed with -9 when the test says so.
import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { SpoolEntry } from '../../src/store/spool';
import { until } from './eventually';

const BUILT_SPOOL = path.resolve(__dirname, '../../dist/store/spool/index.js');

const made: string[] = [];
afterAll(() => {
  for (const dir of made.splice(0)) fs.rmSync(dir, { recursive: true, force: true });
});

/** A new empty folder of this user's (0700), removed after the test file. */
export function tempFolder(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'spool-test-'));
  made.push(dir);
  return dir;
}

/** An entry named `name`, with a body of `bodyBytes` bytes that repeat its name. */
export function entry(name: string, bodyBytes = 32): SpoolEntry {
  return {
    meta: { name, status: 201, headers: [['content-type', 'text/plain']] },
    blobs: [Buffer.alloc(bodyBytes, name), Buffer.from(name)],
  };
}

/** The name of an entry made by entry(). */
export function nameOf(spooled: SpoolEntry): string {
  return (spooled.meta as { name: string }).name;
}

/**
 * An entry as something jest compares quickly: its blobs as base64 (toEqual walks a Buffer byte by
 * byte, seconds for a few MB).
 */
export function comparable(spooled: SpoolEntry): { meta: unknown; blobs: string[] } {
  return { meta: spooled.meta, blobs: spooled.blobs.map((blob) => blob.toString('base64')) };
}

export interface TestProcess {
  readonly child: ChildProcess;
  readonly pid: number;
  /** Every line it has printed so far. */
  readonly lines: string[];
  /** Waits for a line matching `pattern`, and returns it. */
  line(pattern: RegExp): Promise<string>;
  /** kill -9, and waits for it to be gone. */
  killHard(): Promise<void>;
}

/**
 * Runs `script` (CommonJS) in a new node process; `require(process.env.BUILT_SPOOL)` gives it the
 * built spool module. Killed after the test file if still running.
 */
export function startProcess(script: string, env: Record<string, string> = {}): TestProcess {
  if (!fs.existsSync(BUILT_SPOOL))
    throw new Error(`${BUILT_SPOOL} is missing: run npm run build (jest's global setup does)`);
  const child = spawn(process.execPath, ['-e', script], {
    env: { ...process.env, ...env, BUILT_SPOOL },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines: string[] = [];
  let partial = '';
  child.stdout!.on('data', (chunk: Buffer) => {
    const parts = (partial + chunk.toString()).split('\n');
    partial = parts.pop()!;
    lines.push(...parts);
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  running.push(child);
  return {
    child,
    pid: child.pid!,
    lines,
    line: (pattern) =>
      until(() => lines.find((line) => pattern.test(line)), `a line like ${pattern}`, {
        timeoutMs: 20_000,
      }),
    killHard: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    },
  };
}

const running: ChildProcess[] = [];
afterAll(() => {
  for (const child of running.splice(0)) child.kill('SIGKILL');
});
