// The request-walk tool counts what a reader goes through to follow a request (files entered, stays,
// climbs back up). Each rule is shown on a fixture project small enough to count by hand; then the
// tool is run on this repository's real entries, whose figures are recorded, not yet held to targets.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { formatWalk, walkRequest, type WalkOptions } from '../support/request-walk';
import { figuresWanted, recordFigures } from '../support/run-report';

/** The real entries walked at the end (change them here). */
export const REAL_ENTRIES: readonly (Omit<WalkOptions, 'root'> & { name: string })[] = [
  {
    name: 'REST',
    file: 'src/protected/pipeline.ts',
    fn: 'serveProtected',
    param: 'request',
    implementations: { ProtocolAdapter: 'src/rest/adapter.ts#REST' },
  },
  {
    name: 'MCP',
    file: 'src/protected/pipeline.ts',
    fn: 'serveProtected',
    param: 'request',
    implementations: { ProtocolAdapter: 'src/mcp/adapter.ts#mcpAdapter' },
  },
  {
    name: 'A2A',
    file: 'src/protected/pipeline.ts',
    fn: 'serveProtected',
    param: 'request',
    implementations: { ProtocolAdapter: 'src/a2a/adapter.ts#A2A' },
  },
];

/**
 * What a newcomer following one request may have to open and climb back into, at most. Ten since
 * long calls: a deferred call and a poll of its handle are one more room for every protocol
 * (protected/long-calls.ts), and on an MCP route the tasks extension one more (mcp/tasks.ts).
 */
const MAX_FILES = 10;
const MAX_CLIMBS = 4;

const ROOT = path.join(__dirname, '../..');

const TSCONFIG = JSON.stringify({
  compilerOptions: {
    strict: true,
    target: 'ES2022',
    module: 'commonjs',
    moduleResolution: 'node10',
    types: [],
    noEmit: true,
    skipLibCheck: true,
  },
  include: ['src/**/*.ts'],
});

const REQ = 'export interface Req { x: { n: number }; policy: number }\n';

const made: string[] = [];
afterAll(() => {
  for (const dir of made) fs.rmSync(dir, { recursive: true, force: true });
});

/** A project in a temp dir: tsconfig.json, src/types.ts (the `Req` type) and `files`. */
function project(files: Record<string, string>): string {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'request-walk-'));
  made.push(root);
  const all = { 'tsconfig.json': TSCONFIG, 'src/types.ts': REQ, ...files };
  for (const [name, text] of Object.entries(all)) {
    fs.mkdirSync(path.dirname(path.join(root, name)), { recursive: true });
    fs.writeFileSync(path.join(root, name), text);
  }
  return root;
}

const walk = (root: string, fn = 'entry', file = 'src/a.ts') => walkRequest({ root, file, fn });

/** The figures a test pins, in one object so a failure shows them all. */
const totals = (r: ReturnType<typeof walkRequest>) => ({
  filesEntered: r.filesEntered,
  stays: r.stays,
  climbs: r.climbs,
  returnsToLeftFile: r.returnsToLeftFile,
  files: r.files,
  trace: r.trace,
});

describe('what is followed', () => {
  test('aliases, spreads and object literals carry the request; a piece of it does not', () => {
    const root = project({
      'src/a.ts': `import type { Req } from './types';
import { viaSpread, viaAlias, viaShorthand, viaProperty } from './b';
import { untracked, piece, destructured } from './c';
export function entry(deps: number, request: Req): void {
  const derived = { ...request, policy: 2 };
  const r = request;
  viaSpread(deps, derived);
  viaAlias(r);
  viaShorthand({ request });
  viaProperty({ inner: r });
  untracked(deps);
  piece(request.x);
  const { x } = request;
  destructured(x);
}
`,
      'src/b.ts': `import type { Req } from './types';
export function viaSpread(_d: number, _r: Req): void {}
export function viaAlias(_r: Req): void {}
export function viaShorthand(_o: { request: Req }): void {}
export function viaProperty(_o: { inner: Req }): void {}
`,
      'src/c.ts': `export function untracked(_d: number): void {}
export function piece(_x: { n: number }): void {}
export function destructured(_x: { n: number }): void {}
`,
    });
    // a → b four times and back each time: a b a b a b a b a.
    expect(totals(walk(root))).toEqual({
      filesEntered: 2,
      stays: 9,
      climbs: 0,
      returnsToLeftFile: 7,
      files: ['src/a.ts', 'src/b.ts'],
      trace: [
        'src/a.ts:entry',
        'src/b.ts:viaSpread',
        'src/b.ts:viaAlias',
        'src/b.ts:viaShorthand',
        'src/b.ts:viaProperty',
      ],
    });
  });

  test('untracked calls are not followed; in a callee only the parameters bound to it are tracked', () => {
    const root = project({
      'src/a.ts': `import type { Req } from './types';
import { skipped, piece, shaped, bound } from './b';
export function entry(deps: number, request: Req): void {
  skipped(deps);
  piece(request.x);
  request.x.n.toFixed(1);
  shaped(request);
  bound(deps, request);
}
`,
      'src/b.ts': `import type { Req } from './types';
import { never, next } from './c';
export function skipped(d: number): void { never(d); }
export function piece(x: { n: number }): void { never(x.n); }
export function shaped({ x }: Req): void { never(x.n); next(x as unknown as Req); }
export function bound(deps: number, request: Req): void { never(deps); next(request); }
`,
      'src/c.ts': `import type { Req } from './types';
export function never(_d: number): void {}
export function next(_r: Req): void {}
`,
    });
    // skipped and piece never get the request, nor does toFixed (not in src/); shaped gets it
    // destructured (visited, nothing tracked inside): a b a; bound passes it on to next: b c b a.
    expect(totals(walk(root))).toEqual({
      filesEntered: 3,
      stays: 7,
      climbs: 0,
      returnsToLeftFile: 4,
      files: ['src/a.ts', 'src/b.ts', 'src/c.ts'],
      trace: ['src/a.ts:entry', 'src/b.ts:shaped', 'src/b.ts:bound', 'src/c.ts:next'],
    });
  });

  test('a method on a tracked receiver is followed, with `this` tracked; so is a constructor', () => {
    const root = project({
      'src/a.ts': `import { Scope } from './scope';
import { Recorder } from './recorder';
export function entry(_deps: number, scope: Scope): void {
  scope.answer();
  scope.part.run();
  scope.label.toUpperCase();
  new Recorder(scope);
}
`,
      'src/scope.ts': `import { Part } from './part';
import { note } from './note';
export class Scope {
  label = 'x';
  part = new Part();
  answer(): void {
    this.finish();
    note(this);
  }
  finish(): void {}
}
`,
      'src/part.ts': `export class Part {
  run(): void { this.stop(); }
  stop(): void {}
}
`,
      'src/note.ts': `import type { Scope } from './scope';
export function note(_s: Scope): void {}
`,
      'src/recorder.ts': `import type { Scope } from './scope';
export class Recorder {
  constructor(scope: Scope) { scope.finish(); }
}
`,
    });
    // a → scope (answer; finish stays there) → note → scope → a; a → part (run: its `this` is a
    // piece of the scope, so stop is not followed) → a; toUpperCase is not in src/; a → recorder →
    // scope (finish, already read) → recorder → a.
    expect(totals(walk(root))).toEqual({
      filesEntered: 5,
      stays: 11,
      climbs: 0,
      returnsToLeftFile: 6,
      files: ['src/a.ts', 'src/scope.ts', 'src/note.ts', 'src/part.ts', 'src/recorder.ts'],
      trace: [
        'src/a.ts:entry',
        'src/scope.ts:Scope.answer',
        'src/scope.ts:Scope.finish',
        'src/note.ts:note',
        'src/part.ts:Part.run',
        'src/recorder.ts:Recorder.constructor',
        'src/scope.ts:Scope.finish',
      ],
    });
  });

  test('a const that names functions is followed into each of them', () => {
    const root = project({
      'src/a.ts': `import type { Req } from './types';
import { plain, fancy } from './b';
export function entry(flag: boolean, request: Req): void {
  const send = flag ? fancy : plain;
  send(request);
}
`,
      'src/b.ts': `import type { Req } from './types';
export function plain(_r: Req): void {}
export const fancy = (_r: Req): void => {};
`,
    });
    expect(totals(walk(root))).toEqual({
      filesEntered: 2,
      stays: 5,
      climbs: 0,
      returnsToLeftFile: 3,
      files: ['src/a.ts', 'src/b.ts'],
      trace: ['src/a.ts:entry', 'src/b.ts:fancy', 'src/b.ts:plain'],
    });
  });

  test('functions from node_modules, .d.ts files and outside src/ are not followed; an inline callback is read in place', () => {
    const root = project({
      'node_modules/helper-lib/package.json': JSON.stringify({
        name: 'helper-lib',
        version: '1.0.0',
        types: 'index.ts',
      }),
      'node_modules/helper-lib/index.ts': `export function lib(request: unknown, then: () => void): void { then(); }
export function libOnly(_request: unknown): void {}
`,
      'src/typed.d.ts': 'export declare function typed(request: unknown): void;\n',
      'lib/outside.ts': 'export function outside(_request: unknown): void {}\n',
      'src/a.ts': `import { lib, libOnly } from 'helper-lib';
import { typed } from './typed';
import { outside } from '../lib/outside';
import { kept } from './b';
import type { Req } from './types';
export function entry(_d: number, request: Req): void {
  libOnly(request);
  typed(request);
  outside(request);
  lib(request, () => kept(request));
}
`,
      'src/b.ts': `import type { Req } from './types';
export function kept(_r: Req): void {}
`,
    });
    expect(totals(walk(root))).toEqual({
      filesEntered: 2,
      stays: 3,
      climbs: 0,
      returnsToLeftFile: 1,
      files: ['src/a.ts', 'src/b.ts'],
      trace: ['src/a.ts:entry', 'src/b.ts:kept'],
    });
  });
});

describe('calls through an interface', () => {
  const files = {
    'src/port.ts': `import type { Req } from './types';
export interface Port { read(r: Req): void; write(r: Req): void }
`,
    'src/a.ts': `import type { Req } from './types';
import type { Port } from './port';
export function entry(port: Port, request: Req): void {
  port.read(request);
  port.write(request);
}
`,
    'src/one.ts': `import type { Req } from './types';
import type { Port } from './port';
function readOne(_r: Req): void {}
export const ONE: Port = { read: readOne, write(_r) {} };
`,
    'src/two.ts': `import type { Port } from './port';
export function two(): Port {
  return { read: (_r) => undefined, write: (_r) => undefined };
}
`,
  };

  test('stop at the signature, unless told which implementation to read', () => {
    const root = project(files);
    const options = { root, file: 'src/a.ts', fn: 'entry', param: 'request' };
    expect(walkRequest(options).files).toEqual(['src/a.ts']);
    expect(walkRequest({ ...options, implementations: { Port: 'src/one.ts#ONE' } }).trace).toEqual([
      'src/a.ts:entry',
      'src/one.ts:readOne',
      'src/one.ts:ONE.write',
    ]);
    expect(walkRequest({ ...options, implementations: { Port: 'src/two.ts#two' } }).files).toEqual([
      'src/a.ts',
      'src/two.ts',
    ]);
  });
});

describe('how it is counted', () => {
  test('A → B → A is one climb', () => {
    const root = project({
      'src/a.ts': `import type { Req } from './types';
import { down } from './b';
export function entry(_d: number, request: Req): void { down(request); }
export function back(_request: Req): void {}
`,
      'src/b.ts': `import type { Req } from './types';
import { back } from './a';
export function down(request: Req): void { back(request); }
`,
    });
    const report = walk(root);
    // a b a b a: the call back into a is the climb; the return into b and then into a are moves
    // into files left before.
    expect(totals(report)).toEqual({
      filesEntered: 2,
      stays: 5,
      climbs: 1,
      returnsToLeftFile: 3,
      files: ['src/a.ts', 'src/b.ts'],
      trace: ['src/a.ts:entry', 'src/b.ts:down', 'src/a.ts:back'],
    });
    expect(formatWalk(report)).toBe(
      [
        'src/a.ts:entry (tracking request): 2 files entered, 5 stays, 1 climbs, 3 returns to a left file',
        'files: src/a.ts, src/b.ts',
        '  src/a.ts:entry',
        '    src/b.ts:down',
        '      src/a.ts:back ↑',
      ].join('\n'),
    );
  });

  test('a climb is any call into a file still open up the stack, a repeat call included', () => {
    const root = project({
      'src/a.ts': `import type { Req } from './types';
import { down } from './b';
export function entry(_d: number, request: Req): void { down(request); }
export function back(_request: Req): void {}
`,
      'src/b.ts': `import type { Req } from './types';
import { back } from './a';
import { deeper } from './c';
export function down(request: Req): void {
  back(request);
  deeper(request);
}
export function up(_request: Req): void {}
`,
      'src/c.ts': `import type { Req } from './types';
import { back } from './a';
import { up } from './b';
export function deeper(request: Req): void {
  back(request);
  up(request);
}
`,
    });
    // a b [a] b c [a] c [b] c b a — the bracketed moves are the three climbs.
    expect(totals(walk(root))).toEqual({
      filesEntered: 3,
      stays: 11,
      climbs: 3,
      returnsToLeftFile: 8,
      files: ['src/a.ts', 'src/b.ts', 'src/c.ts'],
      trace: [
        'src/a.ts:entry',
        'src/b.ts:down',
        'src/a.ts:back',
        'src/c.ts:deeper',
        'src/a.ts:back',
        'src/b.ts:up',
      ],
    });
  });

  test('a function called twice is walked once, but both calls are stays in its file', () => {
    const root = project({
      'src/a.ts': `import type { Req } from './types';
import { twice } from './b';
import { deep } from './c';
export function entry(_d: number, request: Req): void {
  twice(request);
  twice(request);
  local(request);
  local(request);
}
function local(request: Req): void { deep(request); }
`,
      'src/b.ts': `import type { Req } from './types';
import { deep } from './c';
export function twice(request: Req): void { deep(request); }
`,
      'src/c.ts': `import type { Req } from './types';
export function deep(_r: Req): void {}
`,
    });
    // a b c b a, then b again (not re-walked, so no c) a; local (in a: no move) goes to c and back;
    // the second local is in a and not re-walked: no move at all.
    const report = walk(root);
    expect(totals(report)).toEqual({
      filesEntered: 3,
      stays: 9,
      climbs: 0,
      returnsToLeftFile: 6,
      files: ['src/a.ts', 'src/b.ts', 'src/c.ts'],
      trace: [
        'src/a.ts:entry',
        'src/b.ts:twice',
        'src/c.ts:deep',
        'src/b.ts:twice',
        'src/a.ts:local',
        'src/c.ts:deep',
        'src/a.ts:local',
      ],
    });
    expect(report.steps.map((s) => s.repeat)).toEqual([
      false,
      false,
      false,
      true,
      false,
      true,
      true,
    ]);
  });
});

describe('the real protected path', () => {
  test.each(REAL_ENTRIES.map((e) => [e.name, e] as const))('%s', (name, entry) => {
    const report = walkRequest({ ...entry, root: ROOT });
    recordFigures(__filename, `${name} request walk`, {
      entry: report.entry,
      filesEntered: report.filesEntered,
      stays: report.stays,
      climbs: report.climbs,
      returnsToLeftFile: report.returnsToLeftFile,
      files: report.files,
      trace: report.trace,
    });
    // The call tree is for a reader tracing the path: on the console only when asked for.
    if (figuresWanted()) process.stderr.write(`${formatWalk(report)}\n`);
    expect(report.files[0]).toBe(entry.file);
    // Through its adapter: the walk reads the protocol's own file, not only the pipeline's.
    const adapter = entry.implementations!.ProtocolAdapter!.split('#')[0]!;
    expect(report.files).toContain(adapter);
    expect(report.filesEntered).toBeLessThanOrEqual(MAX_FILES);
    expect(report.climbs).toBeLessThanOrEqual(MAX_CLIMBS);
  });
});
