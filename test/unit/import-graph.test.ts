// src/ has no import cycle: a module can be read, tested and loaded without the ones that import it.
// Type-only imports count too (a cycle through types still ties two modules' designs together).
import fs from 'node:fs';
import path from 'node:path';

const SRC = path.join(__dirname, '../../src');

function modules(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) return modules(full);
    return entry.name.endsWith('.ts') ? [full] : [];
  });
}

/** The src modules a module imports or re-exports from, resolved to files. */
function importsOf(file: string): string[] {
  const text = fs.readFileSync(file, 'utf8');
  const found: string[] = [];
  for (const [, spec] of text.matchAll(/^(?:import|export)\s[^'"]*?from\s+'(\.[^']+)'/gm)) {
    const base = path.resolve(path.dirname(file), spec!);
    const target = [`${base}.ts`, path.join(base, 'index.ts')].find((f) => fs.existsSync(f));
    if (target === undefined)
      throw new Error(`${path.relative(SRC, file)}: cannot resolve ${spec}`);
    found.push(target);
  }
  return found;
}

/** Every cycle's members (Tarjan's strongly connected components of more than one module). */
function cycles(graph: Map<string, string[]>): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (v: string): void => {
    index.set(v, next);
    low.set(v, next++);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) !== index.get(v)) return;
    const members: string[] = [];
    let w: string;
    do {
      w = stack.pop()!;
      onStack.delete(w);
      members.push(path.relative(SRC, w));
    } while (w !== v);
    if (members.length > 1 || (graph.get(v) ?? []).includes(v)) found.push(members.sort());
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return found;
}

test('src/ has no import cycle', () => {
  const files = modules(SRC);
  const graph = new Map(files.map((f) => [f, importsOf(f)]));
  expect([...graph.values()].flat().length).toBeGreaterThan(200); // the graph was really read
  expect(cycles(graph)).toEqual([]);
});

test('the cycle finder finds a cycle', () => {
  const graph = new Map([
    ['/a.ts', ['/b.ts']],
    ['/b.ts', ['/c.ts']],
    ['/c.ts', ['/a.ts']],
    ['/d.ts', ['/a.ts']],
  ]);
  expect(cycles(graph).map((c) => c.length)).toEqual([3]);
});

/** The protocol folders (each exports one adapter) and their shared JSON-RPC base. */
const PROTOCOLS = ['rest/', 'mcp/', 'a2a/', 'jsonrpc/'];
const isProtocol = (file: string) => PROTOCOLS.some((folder) => file.startsWith(folder));

test("the engine knows no protocol: protected/ and reconcile/ import nothing from a protocol folder, and adapters only the pipeline's public surface", () => {
  const files = modules(SRC);
  const rel = (f: string) => path.relative(SRC, f).split(path.sep).join('/');
  const edges = files.flatMap((from) => importsOf(from).map((to) => [rel(from), rel(to)] as const));
  expect(edges.length).toBeGreaterThan(200);
  expect(
    edges.filter(
      ([from, to]) =>
        (from.startsWith('protected/') || from.startsWith('reconcile/')) && isProtocol(to),
    ),
  ).toEqual([]);
  // What an adapter may use: the adapter contract and its types, the decisions' types, the
  // outgoing helpers, attaching a repeat to a running stream, and the capture of an answer as it
  // arrives.
  const surface = [
    'protected/protocol.ts',
    'protected/decide.ts',
    'protected/outgoing.ts',
    'protected/attach.ts',
    'protected/stream-capture.ts',
  ];
  const reached = edges.filter(([from, to]) => isProtocol(from) && to.startsWith('protected/'));
  expect(reached.length).toBeGreaterThan(0);
  expect(reached.filter(([, to]) => !surface.includes(to))).toEqual([]);
});
