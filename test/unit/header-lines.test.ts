// The header facts read from the raw lines must be what req.headers would have said: the oracle is
// Node itself, given the same lines over a real connection.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import fc from 'fast-check';
import {
  contentLengthOf,
  type HeaderFacts,
  headerLines,
  readHeaderFacts,
} from '../../src/http/header-lines';
import { rawRequest } from '../support/edge-raw';

/** What req.headers says of each fact; overrides as their comma-separated items, in any order. */
function nodeFacts(req: http.IncomingMessage): unknown {
  const { headers } = req;
  const hostLines = req.rawHeaders.filter(
    (_, i) => i % 2 === 0 && /^host$/i.test(req.rawHeaders[i]!),
  );
  const overrides = ['x-http-method-override', 'x-http-method', 'x-method-override']
    .map((name) => headers[name] as string | undefined)
    .filter((value) => value !== undefined);
  return {
    hostLines: hostLines.length,
    host: headers.host,
    contentType: headers['content-type'],
    contentLength: headers['content-length'],
    transferEncoding: headers['transfer-encoding'],
    connection: headers.connection,
    forwarding:
      headers['x-forwarded-host'] !== undefined ||
      headers['x-forwarded-proto'] !== undefined ||
      headers.forwarded !== undefined,
    overrides: overrides.length === 0 ? undefined : items(overrides.join(',')),
  };
}

function ourFacts(raw: string[]): unknown {
  const facts: HeaderFacts = readHeaderFacts(raw);
  return {
    ...facts,
    overrides: facts.overrides === undefined ? undefined : items(facts.overrides),
  };
}

const items = (list: string): string[] =>
  list
    .split(',')
    .map((item) => item.trim())
    .sort();

/** A name in any mix of cases. */
const spelt = (name: string): fc.Arbitrary<string> =>
  fc
    .array(fc.boolean(), { minLength: name.length, maxLength: name.length })
    .map((upper) => [...name].map((c, i) => (upper[i] ? c.toUpperCase() : c)).join(''));

const NAMES = [
  'host',
  'content-type',
  'connection',
  'forwarded',
  'x-forwarded-host',
  'x-forwarded-proto',
  'x-http-method-override',
  'x-http-method',
  'x-method-override',
  'idempotency-key',
  // Of the lengths the facts look at, but none of them.
  'accept-charset',
  'x-request-id-17x',
  'user',
];
const value = fc.stringMatching(/^[!-~]([ !-~]{0,12}[!-~])?$/);
const line = fc.tuple(fc.constantFrom(...NAMES).chain(spelt), value);

describe('header facts read from the raw lines', () => {
  let server: http.Server;
  let port: number;
  const seen: { node: unknown; ours: unknown; key: unknown; keyNode: unknown }[] = [];

  beforeAll(async () => {
    server = http.createServer({ requireHostHeader: false }, (req, res) => {
      seen.push({
        node: nodeFacts(req),
        ours: ourFacts(req.rawHeaders),
        keyNode: req.headersDistinct['idempotency-key'],
        key: headerLines(req.rawHeaders, 'idempotency-key'),
      });
      req.resume();
      req.on('end', () => res.end());
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  test('are what req.headers says, for any lines in any case', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(line, { maxLength: 12, size: 'max' }),
        fc.boolean(),
        fc.constantFrom('Content-Length', 'content-length', 'CONTENT-LENGTH'),
        async (lines, chunked, lengthName) => {
          seen.length = 0;
          // Framing is Node's to refuse when it is odd: one Content-Length, or chunked.
          const framing: [string, string][] = chunked
            ? [['Transfer-Encoding', 'chunked']]
            : [[lengthName, '2']];
          const response = await rawRequest(port, {
            target: '/',
            host: null,
            headers: [...lines, ...framing],
            body: chunked ? '2\r\nhi\r\n0\r\n\r\n' : 'hi',
            framed: true,
          });
          expect(response.status).toBe(200);
          expect(seen).toHaveLength(1);
          expect(seen[0]!.ours).toEqual(seen[0]!.node);
          expect(seen[0]!.key).toEqual(seen[0]!.keyNode);
        },
      ),
      { numRuns: 200 },
    );
  });

  test('count every Host line and keep the first, as Node does', () => {
    const facts = readHeaderFacts(['Host', 'a', 'HOST', 'b']);
    expect(facts.hostLines).toBe(2);
    expect(facts.host).toBe('a');
  });

  test('an empty override value is sent, not absent', () => {
    // An empty X-HTTP-Method names no method: the edge refuses it rather than ignoring it.
    expect(readHeaderFacts(['X-HTTP-Method', '']).overrides).toBe('');
    expect(readHeaderFacts(['X-Other', '']).overrides).toBeUndefined();
  });

  test('the key lines are every line of its name, in order', () => {
    expect(
      headerLines(['Idempotency-Key', 'a', 'x', 'y', 'IDEMPOTENCY-KEY', 'b, c'], 'idempotency-key'),
    ).toEqual(['a', 'b, c']);
    expect(headerLines(['x', 'y'], 'idempotency-key')).toBeUndefined();
  });

  test('a Content-Length reads as Number() reads it', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.stringMatching(/^[0-9]{0,20}$/, { size: 'max' }),
          fc.constantFrom('', ' 12', '1e3', '0x10', '-1', '12 ', '1.5', '٣'),
          fc.string({ maxLength: 18 }),
        ),
        (value) => {
          expect(contentLengthOf(value)).toBe(Number(value));
        },
      ),
      { numRuns: 2000 },
    );
  });
});
