// A pass-through answer's head: its lines decoded as Node would (latin1), and the hop-by-hop ones
// left out, whatever their spelling. The oracle decodes line by line and lower-cases every name.
import fc from 'fast-check';
import { connectionTokens, HOP_BY_HOP } from '../../src/http/headers';
import { headerStrings, responseHeaders } from '../../src/upstream/response-head';

/** The lines laid out as a head in one buffer (`name: value\r\n`), each a view of it, as undici's are. */
function viewsOfOneHead(lines: readonly Uint8Array[], before = 17): Buffer[] {
  const memory = Buffer.alloc(before + lines.reduce((n, line) => n + line.length + 2, 0) + 2);
  let at = before;
  return lines.map((line) => {
    memory.set(line, at);
    const view = memory.subarray(at, at + line.length);
    at += line.length + 2; // ": " or CRLF after it
    return view;
  });
}

/** What the head was before: every line decoded alone, every name lower-cased. */
function expectedHead(raw: readonly Buffer[], keepAlive: boolean): string[] {
  const lines = raw.map((line) => line.toString('latin1'));
  const connection: string[] = [];
  const kept: string[] = [];
  for (let i = 0; i < lines.length; i += 2) {
    const lower = lines[i]!.toLowerCase();
    if (lower === 'connection') connection.push(lines[i + 1]!);
    else if (!HOP_BY_HOP.has(lower)) kept.push(lines[i]!, lines[i + 1]!);
  }
  const listed = connectionTokens(connection.length === 0 ? undefined : connection);
  const headers: string[] = [];
  for (let i = 0; i < kept.length; i += 2)
    if (!listed.includes(kept[i]!.toLowerCase())) headers.push(kept[i]!, kept[i + 1]!);
  return [...headers, 'connection', keepAlive ? 'keep-alive' : 'close'];
}

const spelt = (name: string): fc.Arbitrary<string> =>
  fc
    .array(fc.boolean(), { minLength: name.length, maxLength: name.length })
    .map((upper) => [...name].map((c, i) => (upper[i] ? c.toUpperCase() : c)).join(''));

const NAMES = [
  ...HOP_BY_HOP,
  'content-type',
  'content-length',
  'date',
  'x-custom',
  // Lengths of looked-for names, but none of them.
  'x-request-id-abc',
  'cache-c',
  'set-cookie',
];
const name = fc.constantFrom(...NAMES).chain(spelt);
const value = fc.oneof(
  fc.constantFrom('close', 'keep-alive', 'x-custom', 'X-Custom, date', 'text/event-stream'),
  fc
    .uint8Array({ maxLength: 80, size: 'max' })
    .map((bytes) => Buffer.from(bytes).toString('latin1')),
);
const head = fc
  .array(fc.tuple(name, value), { maxLength: 12 })
  .map((pairs) => pairs.flatMap(([n, v]) => [Buffer.from(n, 'latin1'), Buffer.from(v, 'latin1')]));

describe('a pass-through answer’s head', () => {
  test('lines of one read decode as each would alone, any bytes', () => {
    fc.assert(
      fc.property(
        fc.array(fc.uint8Array({ maxLength: 80, size: 'max' }), { maxLength: 20, size: 'medium' }),
        (lines) => {
          const views = viewsOfOneHead(lines);
          expect(headerStrings(views)).toEqual(views.map((view) => view.toString('latin1')));
        },
      ),
      { numRuns: 500 },
    );
  });

  test('lines of separate buffers, strings, and a sparse span are decoded one by one', () => {
    const apart = [Buffer.from('Name'), Buffer.from('Välue', 'latin1')];
    expect(headerStrings(apart)).toEqual(['Name', 'Välue']);
    expect(headerStrings(['a', 'b'])).toEqual(['a', 'b']);
    // Two short lines far apart in one buffer: not decoded as one span.
    const memory = Buffer.alloc(10_000, 0x41);
    const sparse = [memory.subarray(0, 3), memory.subarray(9_000, 9_004)];
    expect(headerStrings(sparse)).toEqual(['AAA', 'AAAA']);
    expect(headerStrings([])).toEqual([]);
  });

  test('leaves out the hop-by-hop lines and those Connection names, in any spelling', () => {
    fc.assert(
      fc.property(head, fc.boolean(), (raw, keepAlive) => {
        const views = viewsOfOneHead(raw);
        expect(responseHeaders(views, keepAlive).headers).toEqual(expectedHead(views, keepAlive));
      }),
      { numRuns: 1000 },
    );
  });

  test('an event stream is told apart by its Content-Type, in any spelling', () => {
    const raw = viewsOfOneHead([Buffer.from('CONTENT-TYPE'), Buffer.from('text/event-stream')]);
    expect(responseHeaders(raw, true).eventStream).toBe(true);
    const json = viewsOfOneHead([Buffer.from('Content-Type'), Buffer.from('application/json')]);
    expect(responseHeaders(json, true).eventStream).toBe(false);
  });
});
