// On a protected MCP route, nothing the proxy cannot read reaches the upstream (src/mcp/read-body.ts).
// Each body here was once passed through unclaimed, and a lenient server ran the refund every time:
// the official SDK's server (its TextDecoder drops a BOM and replaces a bad byte, and it ignores
// Content-Encoding) and an Express server with express.json() (body-parser inflates and honours the
// charset). Now every POST body is decoded once, by the proxy, before it is classified: what it reads
// is forwarded as read (inflated, without the BOM) and runs once per key; what it cannot read is
// answered as the SDK's server answers it and runs zero times. Executions are counted at the tool.
import fs from 'node:fs';
import zlib from 'node:zlib';
import { until } from '../support/eventually';
import {
  type LenientKind,
  type LenientMcpServer,
  type LenientStack,
  startLenientStack,
} from '../support/mcp-lenient-servers';
import { orderId } from '../support/mcp-proxy';
import { postRawMcp, type RawAnswer } from '../support/mcp-raw-post';
import type { TestProxy } from '../support/proxy';

const KINDS: readonly LenientKind[] = ['sdk', 'express'];
const LIMIT = 512 * 1024;

let stack: LenientStack;
let servers: Record<LenientKind, LenientMcpServer>;
let proxy: TestProxy;

beforeAll(async () => {
  stack = await startLenientStack(['maxRequestBytes: 512kb']);
  ({ servers, proxy } = stack);
});
afterAll(async () => {
  await stack?.close();
});

/** Requests sent per path, so a test knows how many log lines its route has once all are written. */
const sent = new Map<string, number>();

/** POSTs these exact bytes to the proxy, counted per path. */
function post(
  path: string,
  body: Buffer,
  headers: Record<string, string> = {},
): Promise<RawAnswer> {
  sent.set(path, (sent.get(path) ?? 0) + 1);
  return postRawMcp(`${proxy.url}${path}`, body, headers);
}

/** A refund call as JSON text; `params` is more JSON text for its params object. */
const callText = (order: string, id = 1, params = '', args = ''): string =>
  `{"jsonrpc":"2.0","id":${id},"method":"tools/call","params":{"name":"refund","arguments":{"order_id":"${order}","amount":5${args}}${params}}}`;

const BOM = Buffer.from([0xef, 0xbb, 0xbf]);

/** The requests an upstream received that mention this order. */
const receivedFor = (server: LenientMcpServer, order: string) =>
  server.received.filter((seen) => seen.body.includes(order));

/** The request log lines of a route, once every request sent to it has its line. */
async function logLines(route: string): Promise<Record<string, unknown>[]> {
  const count = sent.get(`/${route}/mcp`) ?? 0;
  const lines = () => proxy.logs.filter((line) => line.msg === 'request' && line.route === route);
  await until(() => lines().length >= count, `${count} log lines of ${route}`);
  return lines();
}

/** This process's peak resident memory so far (Linux), in bytes. */
function peakRss(): number {
  const status = fs.readFileSync('/proc/self/status', 'utf8');
  return Number(/VmHWM:\s+(\d+) kB/.exec(status)?.[1]) * 1024;
}

describe.each(KINDS)('behind the %s server', (kind) => {
  const path = `/${kind}/mcp`;
  const server = (): LenientMcpServer => servers[kind];

  test.each([
    ['gzip', zlib.gzipSync],
    ['deflate', zlib.deflateSync],
    ['br', zlib.brotliCompressSync],
  ] as const)(
    'a %s call runs once, and the upstream gets it inflated, without Content-Encoding',
    async (encoding, compress) => {
      const order = orderId(`${kind}-${encoding}`);
      const plain = Buffer.from(callText(order));
      const answer = await post(path, compress(plain), {
        'content-encoding': encoding,
        'idempotency-key': order,
      });
      expect(answer.status).toBe(200);
      expect(answer.json).toMatchObject({ jsonrpc: '2.0', id: 1, result: { content: [{}] } });
      expect(server().executions(order)).toBe(1);
      const [seen, ...more] = receivedFor(server(), order);
      expect(more).toHaveLength(0);
      expect(seen?.body.equals(plain)).toBe(true);
      expect(seen?.headers['content-encoding']).toBeUndefined();
      expect(seen?.headers['content-length']).toBe(String(plain.length));
    },
  );

  test('one call sent as gzip, with a BOM, and plain under one key runs once; the upstream gets it without the BOM', async () => {
    const order = orderId(`${kind}-same`);
    const plain = Buffer.from(callText(order));
    const headers = { 'idempotency-key': order };
    const answers = [
      await post(path, zlib.gzipSync(plain), { ...headers, 'content-encoding': 'gzip' }),
      await post(path, Buffer.concat([BOM, plain]), headers),
      await post(path, plain, headers),
    ];
    expect(answers.map((answer) => answer.status)).toEqual([200, 200, 200]);
    expect(answers.map((answer) => answer.headers['idempotent-replayed'])).toEqual([
      undefined,
      'true',
      'true',
    ]);
    expect(answers[1]?.json).toEqual(answers[0]?.json);
    expect(server().executions(order)).toBe(1);
    const seen = receivedFor(server(), order);
    expect(seen).toHaveLength(1);
    expect(seen[0]?.body.equals(plain)).toBe(true);
  });

  test('a BOM alone is stripped: the call runs once and the upstream gets no BOM', async () => {
    const order = orderId(`${kind}-bom`);
    const plain = Buffer.from(callText(order));
    const answer = await post(path, Buffer.concat([BOM, plain]), { 'idempotency-key': order });
    expect(answer.status).toBe(200);
    expect(server().executions(order)).toBe(1);
    expect(receivedFor(server(), order).map((seen) => seen.body.subarray(0, 3))).toEqual([
      plain.subarray(0, 3),
    ]);
  });

  interface Refused {
    readonly name: string;
    readonly status: number;
    readonly code: number;
    readonly type: string;
    /** The body and the headers it is sent with. */
    readonly request: () => [Buffer, Record<string, string>];
  }
  const refused: Refused[] = [
    {
      name: 'one invalid UTF-8 byte in a string argument',
      status: 400,
      code: -32700,
      type: 'json_not_utf8',
      request: () => {
        const [head, tail] = callText('utf8-#').split('#');
        return [Buffer.concat([Buffer.from(head!), Buffer.from([0xff]), Buffer.from(tail!)]), {}];
      },
    },
    {
      name: 'a duplicate key with the method spelt tools\\/call',
      status: 400,
      code: -32600,
      type: 'json_duplicate_key',
      request: () => [
        Buffer.from(
          '{"jsonrpc":"2.0","id":1,"id":1,"method":"tools\\/call","params":{"name":"refund","arguments":{"order_id":"dup","amount":5}}}',
        ),
        {},
      ],
    },
    {
      name: 'params._x nested 1001 deep',
      status: 400,
      code: -32600,
      type: 'json_too_deep',
      request: () => [
        Buffer.from(callText('deep', 1, `,"_x":${'['.repeat(1001)}${']'.repeat(1001)}`)),
        {},
      ],
    },
    {
      name: 'a body that is not JSON',
      status: 400,
      code: -32700,
      type: 'json_invalid',
      request: () => [Buffer.from(callText('notjson').slice(0, -1)), {}],
    },
    {
      name: 'Content-Encoding: compress',
      status: 415,
      code: -32000,
      type: 'content_encoding_unsupported',
      request: () => [Buffer.from(callText('compress')), { 'content-encoding': 'compress' }],
    },
    {
      name: 'a UTF-16LE body with charset=utf-16le',
      status: 415,
      code: -32000,
      type: 'charset_unsupported',
      request: () => [
        Buffer.from(callText('utf16'), 'utf16le'),
        { 'content-type': 'application/json; charset=utf-16le' },
      ],
    },
    {
      name: 'gzip data cut short',
      status: 400,
      code: -32700,
      type: 'content_encoding_invalid',
      request: () => [
        zlib.gzipSync(Buffer.from(callText('cut'))).subarray(0, 20),
        { 'content-encoding': 'gzip' },
      ],
    },
  ];

  test.each(refused)(
    '$name is answered $status/$code three times out of three, never forwarded, and runs 0 times',
    async ({ request, status, code, type }) => {
      const [body, headers] = request();
      const before = { runs: server().totalExecutions(), received: server().received.length };
      const logged = (await logLines(kind)).length;
      for (let attempt = 0; attempt < 3; attempt++) {
        const answer = await post(path, body, { 'idempotency-key': `refused-${type}`, ...headers });
        expect(answer.status).toBe(status);
        expect(answer.headers['content-type']).toMatch(/^application\/json/);
        expect(answer.json).toEqual({
          jsonrpc: '2.0',
          error: {
            code,
            message: expect.stringMatching(/\. Send /),
            data: expect.objectContaining({ type }),
          },
          id: null,
        });
      }
      expect(server().totalExecutions()).toBe(before.runs);
      expect(server().received.length).toBe(before.received);
      const lines = (await logLines(kind)).slice(logged);
      expect(lines.map((line) => line.outcome)).toEqual([
        'bad_request',
        'bad_request',
        'bad_request',
      ]);
    },
  );

  test('a gzip bomb (small compressed, 256 MiB inflated) is a 413, runs 0 times, and is never held in memory', async () => {
    // Concatenated gzip members are one gzip stream: 256 members of 1 MiB of zeros each.
    const member = zlib.gzipSync(Buffer.alloc(1024 * 1024));
    const bomb = Buffer.concat(Array.from({ length: 256 }, () => member));
    expect(bomb.length).toBeLessThan(LIMIT);
    const before = {
      runs: server().totalExecutions(),
      received: server().received.length,
      peak: peakRss(),
    };
    const answer = await post(path, bomb, {
      'content-encoding': 'gzip',
      'idempotency-key': 'bomb',
    });
    // Inflated whole, the bomb would have raised the peak by 256 MiB at least.
    expect(peakRss() - before.peak).toBeLessThan(64 * 1024 * 1024);
    expect(answer.status).toBe(413);
    expect(answer.json).toEqual({
      jsonrpc: '2.0',
      error: {
        code: -32000,
        message: `Decompressed, the message is larger than this route's limit of ${LIMIT} bytes (maxRequestBytes); send a smaller one.`,
        data: { type: 'request_too_large', code: 'REQUEST_TOO_LARGE' },
      },
      id: null,
    });
    expect(server().totalExecutions()).toBe(before.runs);
    expect(server().received.length).toBe(before.received);
    const [line] = (await logLines(kind)).slice(-1);
    expect(line?.outcome).toBe('too_large');
  });

  test('a body over maxRequestBytes as sent is a 413 in the same shape, and the connection closes', async () => {
    const order = orderId(`${kind}-big`);
    const big = Buffer.from(callText(order, 1, `,"pad":"${'x'.repeat(LIMIT)}"`));
    const answer = await post(path, big, { 'idempotency-key': order });
    expect(answer.status).toBe(413);
    expect(answer.headers.connection).toBe('close');
    expect(answer.json).toMatchObject({
      jsonrpc: '2.0',
      error: { code: -32000, data: { type: 'request_too_large', code: 'REQUEST_TOO_LARGE' } },
      id: null,
    });
    expect(server().executions(order)).toBe(0);
  });
});

describe('a held cancel', () => {
  const cancel = (requestId: number) =>
    Buffer.from(
      JSON.stringify({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId } }),
    );
  const cancelsReceived = (server: LenientMcpServer, tenant: string) =>
    server.received.filter(
      (seen) =>
        seen.headers.authorization === `Bearer ${tenant}` &&
        seen.body.includes('notifications/cancelled'),
    ).length;

  test('is only the cancel of the caller whose call runs: another tenant’s, or another route’s, id 5 goes upstream', async () => {
    const { sdk, express } = servers;
    const order = orderId('held');
    const call = post('/sdk/mcp', Buffer.from(callText(order, 5, '', ',"hold":true')), {
      'idempotency-key': order,
    });
    await sdk.started(order);

    const otherTenant = await post('/sdk/mcp', cancel(5), { authorization: 'Bearer tenant-b' });
    expect(otherTenant.status).toBe(202);
    expect(cancelsReceived(sdk, 'tenant-b')).toBe(1);

    const otherRoute = await post('/express/mcp', cancel(5));
    expect(otherRoute.status).toBe(202);
    expect(cancelsReceived(express, 'tenant-a')).toBe(1);

    const own = await post('/sdk/mcp', cancel(5));
    expect(own.status).toBe(202);
    expect(cancelsReceived(sdk, 'tenant-a')).toBe(0);

    sdk.release();
    const answer = await call;
    expect(answer.status).toBe(200);
    expect(answer.json).toMatchObject({ id: 5, result: { content: [{}] } });
    expect(sdk.executions(order)).toBe(1);
    const cancels = (await logLines('sdk')).filter((line) => line.outcome === 'cancel_held');
    expect(cancels).toHaveLength(1);
  });
});
