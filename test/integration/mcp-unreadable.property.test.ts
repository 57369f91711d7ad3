// Property: however one tool call's body is spelled — gzip, deflate, br or none, a BOM or none,
// whitespace, its arguments' key order, its JSON-RPC id, `charset=utf-8` in any case — under one
// Idempotency-Key the tool runs exactly once, and every spelling is answered 200; mixed in among
// them, bodies the proxy cannot read (a bad UTF-8 byte, a duplicate key with an escaped method, a
// UTF-16 charset, an unknown encoding) are refused and never run it. Against the official SDK's
// server and an Express server, both more lenient readers than the proxy (mcp-lenient-servers.ts).
import zlib from 'node:zlib';
import fc from 'fast-check';
import {
  type LenientKind,
  type LenientMcpServer,
  type LenientStack,
  startLenientStack,
} from '../support/mcp-lenient-servers';
import { orderId } from '../support/mcp-proxy';
import { postRawMcp } from '../support/mcp-raw-post';
import type { TestProxy } from '../support/proxy';

let stack: LenientStack;
let servers: Record<LenientKind, LenientMcpServer>;
let proxy: TestProxy;

beforeAll(async () => {
  stack = await startLenientStack();
  ({ servers, proxy } = stack);
});
afterAll(async () => {
  await stack?.close();
});

type Encoding = 'identity' | 'gzip' | 'deflate' | 'br';

/** One readable spelling of the call. */
interface Spelling {
  readonly kind: 'readable';
  readonly id: number;
  readonly encoding: Encoding;
  readonly bom: boolean;
  readonly pretty: boolean;
  readonly amountFirst: boolean;
  readonly charset: string | null;
}

/** One body the proxy must refuse. */
interface Poison {
  readonly kind: 'poison';
  readonly what: 'bad-utf8' | 'duplicate-key' | 'utf-16' | 'unknown-encoding';
}

const spelling: fc.Arbitrary<Spelling> = fc.record({
  kind: fc.constant('readable' as const),
  id: fc.integer({ min: 1, max: 1_000_000 }),
  encoding: fc.constantFrom<Encoding>('identity', 'gzip', 'deflate', 'br'),
  bom: fc.boolean(),
  pretty: fc.boolean(),
  amountFirst: fc.boolean(),
  charset: fc.constantFrom(null, 'utf-8', 'UTF-8', 'Utf-8'),
});
const poison: fc.Arbitrary<Poison> = fc.record({
  kind: fc.constant('poison' as const),
  what: fc.constantFrom('bad-utf8', 'duplicate-key', 'utf-16', 'unknown-encoding'),
});

const BOM = Buffer.from([0xef, 0xbb, 0xbf]);

function callJson(order: string, s: Spelling): string {
  const args = s.amountFirst ? { amount: 5, order_id: order } : { order_id: order, amount: 5 };
  const call = {
    jsonrpc: '2.0',
    id: s.id,
    method: 'tools/call',
    params: { name: 'refund', arguments: args },
  };
  return JSON.stringify(call, null, s.pretty ? 2 : undefined);
}

function encode(body: Buffer, encoding: Encoding): Buffer {
  if (encoding === 'gzip') return zlib.gzipSync(body);
  if (encoding === 'deflate') return zlib.deflateSync(body);
  if (encoding === 'br') return zlib.brotliCompressSync(body);
  return body;
}

function readableRequest(order: string, s: Spelling): [Buffer, Record<string, string>] {
  const text = Buffer.from(callJson(order, s));
  const body = encode(s.bom ? Buffer.concat([BOM, text]) : text, s.encoding);
  const headers: Record<string, string> = {
    'content-type':
      s.charset === null ? 'application/json' : `application/json; charset=${s.charset}`,
  };
  if (s.encoding !== 'identity') headers['content-encoding'] = s.encoding;
  return [body, headers];
}

function poisonRequest(order: string, p: Poison): [Buffer, Record<string, string>] {
  const call = (args: string) =>
    `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"refund","arguments":{${args}}}}`;
  switch (p.what) {
    case 'bad-utf8': {
      const [before, after] = call(`"order_id":"${order}","amount":5,"note":"#"`).split('#');
      return [Buffer.concat([Buffer.from(before!), Buffer.from([0xff]), Buffer.from(after!)]), {}];
    }
    case 'duplicate-key':
      return [
        Buffer.from(
          `{"jsonrpc":"2.0","id":7,"method":"tools\\/call","method":"tools\\/call","params":{"name":"refund","arguments":{"order_id":"${order}","amount":5}}}`,
        ),
        {},
      ];
    case 'utf-16':
      return [
        Buffer.from(call(`"order_id":"${order}","amount":5`), 'utf16le'),
        { 'content-type': 'application/json; charset=utf-16le' },
      ];
    case 'unknown-encoding':
      return [
        Buffer.from(call(`"order_id":"${order}","amount":5`)),
        { 'content-encoding': 'compress' },
      ];
  }
}

let run = 0;

test.each<LenientKind>(['sdk', 'express'])(
  'behind the %s server: every readable spelling of one call runs it once, no unreadable one runs it',
  async (kind) => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.oneof({ weight: 3, arbitrary: spelling }, { weight: 1, arbitrary: poison }), {
          minLength: 2,
          maxLength: 6,
        }),
        async (bodies) => {
          const order = orderId(`${kind}-prop-${++run}`);
          const key = { 'idempotency-key': `prop-${kind}-${run}` };
          const statuses: number[] = [];
          for (const body of bodies) {
            const [bytes, headers] =
              body.kind === 'readable' ? readableRequest(order, body) : poisonRequest(order, body);
            const answer = await postRawMcp(`${proxy.url}/${kind}/mcp`, bytes, {
              ...headers,
              ...key,
            });
            statuses.push(answer.status);
          }
          const readable = bodies.filter((b) => b.kind === 'readable').length;
          expect(servers[kind].executions(order)).toBe(readable > 0 ? 1 : 0);
          bodies.forEach((body, n) => {
            if (body.kind === 'readable') expect(statuses[n]).toBe(200);
            else expect([400, 415]).toContain(statuses[n]);
          });
        },
      ),
      { numRuns: 30 },
    );
  },
  120_000,
);
