// The Python client (packages/python-client) as part of `npm test`: its cached venv
// (scripts/test-env.py: pytest, httpx, requests, hatchling, mypy, ruff from pip's index), `mypy
// --strict` and ruff, then its pytest suite — against the proxy built in dist/ by the global setup,
// on this suite's DATABASE_URL, with a real upstream counting executions — which also builds the
// wheel and the sdist and runs the wheel from a fresh venv. Any failure shows the tool's own output.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { databaseUrl } from '../support/proxy';

const REPO_ROOT = path.resolve(__dirname, '../..');
const PACKAGE_DIR = path.join(REPO_ROOT, 'packages/python-client');
/** A first run installs the venv from the index (minutes on a slow mirror); later runs reuse it. */
const SETUP_TIMEOUT_MS = 15 * 60_000;
const SUITE_TIMEOUT_MS = 10 * 60_000;

interface Ran {
  readonly code: number | null;
  readonly output: string;
}

/** Runs a command to its end, stdout and stderr interleaved as the user would see them. */
function run(command: string, args: string[], env: NodeJS.ProcessEnv = {}): Promise<Ran> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      cwd: PACKAGE_DIR,
      env: { ...process.env, PYTHONDONTWRITEBYTECODE: '1', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (data: Buffer) => (output += data.toString()));
    child.stderr.on('data', (data: Buffer) => (output += data.toString()));
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, output }));
  });
}

function expectSuccess(what: string, ran: Ran): void {
  if (ran.code !== 0) throw new Error(`${what} exited with ${String(ran.code)}:\n${ran.output}`);
}

let python: string;
let work: string;

beforeAll(async () => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'python-client-'));
  const env = await run('python3', ['scripts/test-env.py']);
  expectSuccess('scripts/test-env.py (the Python test environment)', env);
  python = env.output.trim().split('\n').at(-1)!;
  expect(fs.existsSync(python)).toBe(true);
}, SETUP_TIMEOUT_MS);

afterAll(() => fs.rmSync(work, { recursive: true, force: true }));

test(
  'the package type-checks under mypy --strict',
  async () => {
    // The files and strictness come from pyproject.toml; the cache goes to a temp dir.
    expectSuccess(
      'mypy',
      await run(python, ['-m', 'mypy', '--strict', '--cache-dir', path.join(work, 'mypy')]),
    );
  },
  SUITE_TIMEOUT_MS,
);

test(
  'the package is formatted and linted by ruff',
  async () => {
    // The rules are pyproject.toml's [tool.ruff]; `ruff format` fixes the formatting.
    const env = { RUFF_CACHE_DIR: path.join(work, 'ruff') };
    expectSuccess(
      'ruff format --check',
      await run(python, ['-m', 'ruff', 'format', '--check'], env),
    );
    expectSuccess('ruff check', await run(python, ['-m', 'ruff', 'check'], env));
  },
  SUITE_TIMEOUT_MS,
);

test(
  'the pytest suite passes against the built proxy',
  async () => {
    const ran = await run(python, ['-m', 'pytest', '-q', '-p', 'no:cacheprovider'], {
      DATABASE_URL: databaseUrl(),
      NODE: process.execPath,
      IDEMPOTENCY_PROXY_ROOT: REPO_ROOT,
    });
    // Exit code 5 is "no tests collected": a suite that lost its tests fails too.
    expectSuccess('pytest', ran);
    const passed = /(\d+) passed/.exec(ran.output);
    expect(Number(passed?.[1] ?? 0)).toBeGreaterThanOrEqual(55);
    expect(ran.output).not.toMatch(/\d+ (failed|error|skipped)/);
  },
  SUITE_TIMEOUT_MS,
);
