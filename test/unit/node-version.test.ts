// An unsupported Node.js gets one line before anything runs: the rule (src/launch/node-version.js)
// over the engines range package.json names, and the real launchers run by a real old Node: the
// `idempotency-proxy` command, `npm test`'s pretest and `npm start`'s prestart. The old Node is
// UNSUPPORTED_NODE (.ci/run brings one) or the machine's own node when that is not supported.
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describeUnless } from '../support/run-report';

const ROOT = path.resolve(__dirname, '../..');
// Plain JavaScript that runs before any build: required, not imported.
// eslint-disable-next-line @typescript-eslint/no-require-imports
const { parseRange, satisfies, unsupportedLine } = require('../../src/launch/node-version.js') as {
  parseRange(range: string): { major: number; minor: number; patch: number }[];
  satisfies(version: string, range: string): boolean;
  unsupportedLine(version: string, range: string): string | undefined;
};
const engines = (
  JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
    engines: { node: string };
  }
).engines.node;

describe('the supported Node.js lines', () => {
  it('are the maintained LTS lines: 22 from 22.19 (undici 8 needs it), 24 and 26', () => {
    expect(parseRange(engines)).toEqual([
      { major: 22, minor: 19, patch: 0 },
      { major: 24, minor: 0, patch: 0 },
      { major: 26, minor: 0, patch: 0 },
    ]);
  });

  it.each([
    ['22.19.0', true],
    ['22.23.5', true],
    ['24.0.0', true],
    ['26.12.1', true],
    ['22.18.9', false],
    ['22.9.0', false],
    ['20.20.2', false],
    ['23.11.0', false],
    ['25.2.1', false],
    ['27.0.0', false],
    ['18.20.8', false],
  ])('Node.js %s is supported: %s', (version, supported) => {
    expect(satisfies(version, engines)).toBe(supported);
    expect(unsupportedLine(version, engines) === undefined).toBe(supported);
  });

  it('tells an unsupported one which lines it needs and which it found, in one line', () => {
    const line = unsupportedLine('20.20.2', engines)!;
    expect(line).toBe(
      'idempotency-proxy needs Node.js 22.19+, 24 or 26 (the maintained LTS lines); this is ' +
        'Node.js 20.20.2. Install one of those (from nodejs.org, or `nvm install 26`) and run this again.',
    );
    expect(line).not.toContain('\n');
  });

  it('refuses a range it cannot read rather than guessing', () => {
    expect(() => parseRange('>=22')).toThrow(
      'engines.node: ">=22" is not a ^MAJOR[.MINOR[.PATCH]] range',
    );
  });
});

/** A node binary on a line engines does not name, or why there is none. */
function oldNode(): { bin?: string; missing?: string } {
  const candidates = [process.env.UNSUPPORTED_NODE, '/usr/bin/node', '/usr/local/bin/node'];
  for (const bin of candidates) {
    if (!bin || !fs.existsSync(bin)) continue;
    const version = execFileSync(bin, ['-p', 'process.versions.node'], { encoding: 'utf8' }).trim();
    if (!satisfies(version, engines)) return { bin };
  }
  return { missing: 'no unsupported node here (set UNSUPPORTED_NODE to one; .ci/run does)' };
}

const old = oldNode();

describeUnless(old.missing, 'node-version.test.ts: the launchers on an old Node')(
  'an old Node.js running the launchers',
  () => {
    const bin = old.bin!;
    const version = (): string =>
      execFileSync(bin, ['-p', 'process.versions.node'], { encoding: 'utf8' }).trim();
    const expected = (): string => unsupportedLine(version(), engines)!;
    // npm resolves `node` in its scripts from PATH: the old one first.
    const env = { ...process.env, PATH: `${path.dirname(bin)}:${process.env.PATH}` };

    it('the idempotency-proxy command prints the one line and exits 1, running nothing else', () => {
      const run = spawnSync(bin, [path.join(ROOT, 'src/launch/idempotency-proxy.js'), 'check'], {
        cwd: ROOT,
        encoding: 'utf8',
      });
      expect({ status: run.status, stderr: run.stderr, stdout: run.stdout }).toEqual({
        status: 1,
        stderr: `${expected()}\n`,
        stdout: '',
      });
    });

    it.each([
      ['npm test', ['test']],
      ['npm start', ['start']],
    ])('%s stops at that line, before any of the project runs', (_name, args) => {
      const run = spawnSync('npm', args, { cwd: ROOT, encoding: 'utf8', env, timeout: 60_000 });
      expect(run.status).toBe(1);
      const lines = run.stderr.split('\n').filter((line) => line.length > 0);
      // Ours is the first line on stderr; what follows is npm's own report of the failed script.
      expect(lines[0]).toBe(expected());
      expect(lines.filter((line) => !line.startsWith('npm '))).toEqual([expected()]);
      expect(run.stderr).not.toMatch(/TypeError|building dist/);
    });
  },
);
