// What holding the short-lived classes through the heap bound's collections is for: V8 keeps their
// instances' shapes, and the code compiled for them. A process that hashes requests' fingerprints
// (FramedHash, one per request) in a hot loop and collects between rounds, as the bound does, is
// traced for the functions V8 throws away because a shape they embed was cleared.
import { execFileSync } from 'node:child_process';
import path from 'node:path';

const DIST = path.resolve(__dirname, '../../dist');

const HASHING = `
const { FramedHash } = require(${JSON.stringify(`${DIST}/idempotency/fingerprint`)});
const { collectHolding } = require(${JSON.stringify(`${DIST}/heap-bound`)});
const { shortLivedClasses } = require(${JSON.stringify(`${DIST}/short-lived-classes`)});
const held = process.argv.at(-1) === 'held' ? shortLivedClasses() : [];
const recent = new Array(64);
function hashOne(i) {
  return new FramedHash('test').field(String(i)).field('body').digest();
}
for (let round = 0; round < 12; round++) {
  for (let i = 0; i < 20000; i++) recent[i & 63] = hashOne(i);
  recent.fill(undefined);
  collectHolding(gc, held);
}
`;

/** The fingerprint's functions V8 deoptimized because a shape they embed was cleared. */
function clearedFingerprintCode(mode: 'held' | 'none'): string[] {
  const trace = execFileSync(
    process.execPath,
    ['--expose-gc', '--trace-deopt', '-e', HASHING, mode],
    { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 },
  );
  return trace
    .split('\n')
    .filter((line) => line.includes('reason: embedded weak objects cleared'))
    .map((line) => /<SharedFunctionInfo ([^>]*)>/.exec(line)?.[1] ?? '')
    .filter((name) => ['FramedHash', 'field', 'digest', 'hashOne'].includes(name));
}

// Node 22's V8 keeps these shapes through such collections by itself (none cleared, measured):
// there is nothing there for the classes to keep.
const clearsShapes = Number(process.versions.node.split('.')[0]) >= 24;

(clearsShapes ? test : test.skip)(
  'collections between rounds clear the shapes and their code, unless the classes are held (skipped on Node 22: its V8 keeps them)',
  () => {
    expect(clearedFingerprintCode('none').length).toBeGreaterThan(0);
    expect(clearedFingerprintCode('held')).toEqual([]);
  },
);
