// Reading MCP traffic without an SDK (src/mcp/README.md): the event-stream splitter, the JSON-RPC
// message classes, where a call's key comes from, and what its fingerprint covers.
import fc from 'fast-check';
import { parseConfigText } from '../../src/compiler/load';
import type { McpPolicy } from '../../src/config/types';
import { parseJson } from '../../src/idempotency/canonical-json';
import { callPlaceOf, InFlightToolCalls } from '../../src/mcp/in-flight-calls';
import { withId, storedMessage } from '../../src/jsonrpc/jsonrpc';
import { SseReader } from '../../src/jsonrpc/event-stream';
import {
  derivedToolCallKey,
  readMcpMessage,
  sentToolCallKey,
  toolCallFingerprint,
} from '../../src/mcp/tool-call';

/** A route without key.body: the key comes from the header or params.idempotencyKey. */
const NO_BODY_KEY = { body: null, bodyPointer: null, maxLength: 255 };

const mcp: McpPolicy = parseConfigText(
  'upstreams:\n  t: { url: http://127.0.0.1:1 }\nroutes:\n  - name: tools\n    match: { path: /mcp }\n    upstream: t\n    idempotency:\n      mcp: { tools: ["refund*"], ignore: [arguments.trace_id] }\n',
  'proxy.yaml',
  {},
).routes[0]!.idempotency!.mcp!;

const body = (message: unknown): Buffer => Buffer.from(JSON.stringify(message));
const call = (id: unknown, name: string, args?: unknown, extra: object = {}) =>
  body({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args, ...extra } });

/** Classifies a body read-body.ts would have read (these tests' bodies are all JSON). */
function classify(bytes: Buffer) {
  const parsed = parseJson(bytes);
  if (parsed === null) throw new Error(`not JSON: ${bytes.toString()}`);
  return readMcpMessage(parsed, mcp);
}

function readCall(bytes: Buffer) {
  const message = classify(bytes);
  if (message.kind !== 'call') throw new Error(`expected a call, got ${message.kind}`);
  return message;
}

describe('SseReader', () => {
  const stream =
    ': keep-alive\n\nevent: message\nid: 1\ndata: {"a":1}\n\ndata: line one\ndata:line two\r\n\r\ndata\r\rdata: ünïcödé\n\n';

  it('splits events, joins data lines with LF and keeps each event’s exact bytes', () => {
    const reader = new SseReader();
    const events = reader.push(Buffer.from(stream));
    expect(events.map((event) => event.data)).toEqual([
      undefined,
      '{"a":1}',
      'line one\nline two',
      '',
      'ünïcödé',
    ]);
    expect(Buffer.concat(events.map((event) => event.bytes)).toString()).toBe(stream);
    expect(reader.rest().length).toBe(0);
  });

  it('gives the same events and bytes however the stream is cut into chunks', () => {
    const bytes = Buffer.from(stream);
    const whole = new SseReader().push(bytes);
    fc.assert(
      fc.property(fc.uniqueArray(fc.integer({ min: 1, max: bytes.length - 1 })), (cuts) => {
        const reader = new SseReader();
        const events = [];
        let at = 0;
        for (const cut of [...cuts.sort((a, b) => a - b), bytes.length]) {
          events.push(...reader.push(bytes.subarray(at, cut)));
          at = cut;
        }
        expect(events.map((event) => event.data)).toEqual(whole.map((event) => event.data));
        expect(Buffer.concat(events.map((event) => event.bytes)).equals(bytes)).toBe(true);
      }),
    );
  });

  it('ends an event at a CR that is the last byte so far, and skips an LF that follows in the next chunk', () => {
    const reader = new SseReader();
    const [first] = reader.push(Buffer.from('data: 1\r\r'));
    expect(first).toEqual({ bytes: Buffer.from('data: 1\r\r'), data: '1' });
    // The LF completes the CRLF: not an empty line, so not an event of its own.
    expect(reader.push(Buffer.from('\ndata: 2\r'))).toEqual([]);
    const [second] = reader.push(Buffer.from('\n\r\n'));
    expect(second).toEqual({ bytes: Buffer.from('\ndata: 2\r\n\r\n'), data: '2' });
    expect(reader.rest().length).toBe(0);
  });

  it('keeps an unfinished event as the rest, and ignores fields that only start with "data"', () => {
    const reader = new SseReader();
    expect(reader.push(Buffer.from('database: x\ndata: 1\n\ndata: 2'))).toHaveLength(1);
    expect(reader.rest().toString()).toBe('data: 2');
    const [event] = new SseReader().push(Buffer.from('database: x\n\n'));
    expect(event?.data).toBeUndefined();
  });
});

describe('readMcpMessage', () => {
  it('picks out a protected tools/call with its id as JSON text', () => {
    expect(readCall(call(7, 'refund', { amount: 1 })).call).toEqual({
      idText: '7',
      tool: 'refund',
    });
    expect(readCall(call('a"b', 'refund_partial')).call.idText).toBe('"a\\"b"');
  });

  it('passes everything that is not a protected call', () => {
    const pass = [
      call(1, 'get_balance', {}),
      body({ jsonrpc: '2.0', id: 1, method: 'initialize', params: {} }),
      body({ jsonrpc: '2.0', method: 'notifications/initialized' }),
      body({ jsonrpc: '2.0', id: 1, result: {} }),
      body([{ jsonrpc: '2.0', id: 1, method: 'tools/list' }]),
      Buffer.from('"tools/call"'),
    ];
    for (const bytes of pass) expect(classify(bytes)).toEqual({ kind: 'pass' });
  });

  it('refuses a batch with a protected call and a call without an id', () => {
    const batch = body([
      { jsonrpc: '2.0', id: 1, method: 'tools/list' },
      JSON.parse(call(2, 'refund').toString()),
    ]);
    expect(classify(batch)).toEqual({ kind: 'batch-with-call', tool: 'refund' });
    const notification = body({ jsonrpc: '2.0', method: 'tools/call', params: { name: 'refund' } });
    expect(classify(notification)).toEqual({ kind: 'notification-call', tool: 'refund' });
  });
});

describe('keys and fingerprints of a call', () => {
  it('takes the header first, then params.idempotencyKey, else none (derive one)', () => {
    const { parsed } = readCall(call(1, 'refund', {}, { idempotencyKey: 'param-key' }));
    expect(sentToolCallKey(['header-key'], parsed, NO_BODY_KEY, 'idempotency-key')).toEqual({
      ok: true,
      key: 'header-key',
    });
    expect(sentToolCallKey(undefined, parsed, NO_BODY_KEY, 'idempotency-key')).toEqual({
      ok: true,
      key: 'param-key',
    });
    expect(
      sentToolCallKey(undefined, readCall(call(1, 'refund', {})).parsed, NO_BODY_KEY, 'k'),
    ).toBeUndefined();
    const numeric = readCall(call(1, 'refund', {}, { idempotencyKey: 5 })).parsed;
    expect(sentToolCallKey(undefined, numeric, NO_BODY_KEY, 'k')).toMatchObject({
      ok: false,
      problem: 'invalid',
    });
    expect(sentToolCallKey(['a', 'b'], parsed, NO_BODY_KEY, 'idempotency-key')).toMatchObject({
      ok: false,
    });
  });

  it('ignores the id, _meta, idempotencyKey, key order and ignored arguments; not other arguments', () => {
    const first = readCall(call(1, 'refund', { order: 'o1', amount: 5, trace_id: 't1' }));
    const retry = readCall(
      call(
        99,
        'refund',
        { amount: 5.0, trace_id: 't2', order: 'o1' },
        { _meta: { progressToken: 3 } },
      ),
    );
    const other = readCall(call(1, 'refund', { order: 'o1', amount: 6 }));
    const otherTool = readCall(call(1, 'refund_partial', { order: 'o1', amount: 5 }));
    const print = (m: ReturnType<typeof readCall>) =>
      toolCallFingerprint(m.call, m.parsed, mcp).toString('hex');
    const key = (m: ReturnType<typeof readCall>) => derivedToolCallKey(m.call, m.parsed, mcp);
    expect(print(retry)).toBe(print(first));
    expect(key(retry)).toBe(key(first));
    expect(key(first)).toMatch(/^derived:[A-Za-z0-9_-]{43}$/);
    expect(print(other)).not.toBe(print(first));
    expect(print(otherTool)).not.toBe(print(first));
    expect(key(first)).not.toBe(print(first));
  });
});

describe('continuation rounds (input_required, 2026-07-28)', () => {
  it('key the user’s answers with the call, but never the server’s requestState', () => {
    const args = { order: 'o1', amount: 5 };
    const first = readCall(call(1, 'refund', args));
    const accept = (state: string, id = 2) =>
      readCall(
        call(id, 'refund', args, {
          inputResponses: { confirm: { action: 'accept' } },
          requestState: state,
        }),
      );
    const decline = readCall(
      call(3, 'refund', args, { inputResponses: { confirm: { action: 'decline' } } }),
    );
    const key = (m: ReturnType<typeof readCall>) => derivedToolCallKey(m.call, m.parsed, mcp);
    const print = (m: ReturnType<typeof readCall>) =>
      toolCallFingerprint(m.call, m.parsed, mcp).toString('hex');
    expect(key(accept('s1'))).toBe(key(accept('s2', 9)));
    expect(print(accept('s1'))).toBe(print(accept('s2', 9)));
    expect(new Set([key(first), key(accept('s1')), key(decline)]).size).toBe(3);
    expect(new Set([print(first), print(accept('s1')), print(decline)]).size).toBe(3);
  });
});

describe('stored messages', () => {
  it('are answered under each retry’s own id', () => {
    const stored = storedMessage('result', '{"content":[]}');
    expect(JSON.parse(withId(stored, '"r-2"').toString())).toEqual({
      jsonrpc: '2.0',
      id: 'r-2',
      result: { content: [] },
    });
    expect(withId(Buffer.from('{"other":1}'), '1').toString()).toBe('{"other":1}');
  });
});

describe('InFlightToolCalls', () => {
  const policy = { scope: 'tools', tenant: ['header:authorization'] };
  const place = (authorization: string, session?: string, scope = 'tools') =>
    callPlaceOf(
      { ...policy, scope },
      session === undefined ? { authorization } : { authorization, 'mcp-session-id': session },
    );

  it('holds a cancel only for the same scope, tenant, session and id', () => {
    const calls = new InFlightToolCalls();
    calls.add(place('Bearer a'), '5');
    expect(calls.has(place('Bearer a'), '5')).toBe(true);
    expect(calls.has(place('bearer  a'), '5')).toBe(true); // one tenant, however the scheme is spelt
    expect(calls.has(place('Bearer b'), '5')).toBe(false);
    expect(calls.has(place('Bearer a', 's-1'), '5')).toBe(false);
    expect(calls.has(place('Bearer a', undefined, 'other'), '5')).toBe(false);
    expect(calls.has(place('Bearer a'), '"5"')).toBe(false);
  });

  it('counts the same call twice in flight, and forgets it when both end', () => {
    const calls = new InFlightToolCalls();
    calls.add(place('Bearer a'), '5');
    calls.add(place('Bearer a'), '5');
    calls.delete(place('Bearer a'), '5');
    expect(calls.has(place('Bearer a'), '5')).toBe(true);
    calls.delete(place('Bearer a'), '5');
    expect(calls.has(place('Bearer a'), '5')).toBe(false);
  });
});
