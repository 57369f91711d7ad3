// The edges of a tool's answer stream on an MCP route (src/mcp/README.md), against a raw upstream
// that writes the exact SSE bytes a test chooses, chunk by chunk:
// - progress events and a final response cut at odd places (inside a field name, between CR and
//   LF, inside a UTF-8 character, between the two LFs that end an event, a response spread over
//   several `data:` lines) reach the client event by event, byte for byte, each progress event
//   before the upstream writes the next; the final response is stored, and a retry replays it;
// - a server-to-client request (an elicitation) that reuses the call's id but has no `result` is
//   passed on, answered by the client, and not taken for the tool's response;
// - a result larger than the route's maxResponseBytes (real SDK server, SSE and JSON answers): the
//   first caller gets all of it, a retry gets `idempotency_result_not_stored`, the tool never
//   runs again.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { until as untilTruthy } from '../support/eventually';
import { finalMessage, postMcp, toolCall } from '../support/mcp-client';
import { mcpProxyYaml, orderId } from '../support/mcp-proxy';
import { type McpToolServer, startMcpToolServer } from '../support/mcp-tool-server';
import { startProxy, type TestProxy } from '../support/proxy';

const HEADERS = {
  'content-type': 'application/json',
  accept: 'application/json, text/event-stream',
  'mcp-protocol-version': '2025-06-18',
};

async function until(what: string, done: () => boolean, timeoutMs = 3_000): Promise<void> {
  await untilTruthy(done, what, { timeoutMs, intervalMs: 5 });
}

/** Resolves after `ms`: the small pauses between chunks, so each goes out as a write of its own. */
const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

type Script = (
  res: http.ServerResponse,
  call: { id: unknown; order: string },
  write: (chunk: string | Buffer) => Promise<void>,
) => Promise<void>;

interface RawUpstream {
  readonly origin: string;
  /** tools/call requests received, by order id. */
  calls(order: string): number;
  /** JSON-RPC responses the client POSTed back (answers to the server's own requests). */
  readonly clientResponses: Record<string, unknown>[];
  /** Every byte written for the last tools/call of an order. */
  written(order: string): Buffer;
  close(): Promise<void>;
}

/** An MCP-shaped upstream: tools/call runs the test's script; anything else gets 202. */
async function startRawUpstream(script: Script): Promise<RawUpstream> {
  const calls = new Map<string, number>();
  const written = new Map<string, Buffer[]>();
  const clientResponses: Record<string, unknown>[] = [];
  const server = http.createServer((req, res) => {
    void (async () => {
      const chunks: Buffer[] = [];
      for await (const chunk of req) chunks.push(chunk as Buffer);
      const message = JSON.parse(Buffer.concat(chunks).toString('utf8')) as {
        id?: unknown;
        method?: string;
        params?: { arguments?: { order_id?: string } };
      };
      if (message.method !== 'tools/call') {
        if (message.method === undefined) clientResponses.push(message);
        res.writeHead(202).end();
        return;
      }
      const order = message.params?.arguments?.order_id ?? '';
      calls.set(order, (calls.get(order) ?? 0) + 1);
      const bytes: Buffer[] = [];
      written.set(order, bytes);
      const write = async (chunk: string | Buffer): Promise<void> => {
        const buffer = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
        bytes.push(buffer);
        await new Promise<void>((resolve) => res.write(buffer, () => resolve()));
        await pause(3);
      };
      await script(res, { id: message.id, order }, write);
      res.end();
    })().catch(() => res.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    calls: (order) => calls.get(order) ?? 0,
    clientResponses,
    written: (order) => Buffer.concat(written.get(order) ?? []),
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** A raw upstream running `script`, with the MCP proxy in front, for one describe block. */
function proxiedRawUpstream(script: Script): { upstream: RawUpstream; proxy: TestProxy } {
  const env = {} as { upstream: RawUpstream; proxy: TestProxy };
  beforeAll(async () => {
    env.upstream = await startRawUpstream(script);
    env.proxy = await startProxy({ yaml: mcpProxyYaml(env.upstream.origin) });
  });
  afterAll(async () => {
    await env.proxy?.close();
    await env.upstream?.close();
  });
  return env;
}

const sseHead = (res: http.ServerResponse) =>
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });

/**
 * Reads an SSE answer as it arrives, as a browser's EventSource would (WHATWG grammar: a line ends
 * at CRLF, LF or CR, the moment the CR arrives): the messages so far, in order, and all the bytes.
 */
class StreamReader {
  readonly messages: Record<string, unknown>[] = [];
  private bytes: Buffer[] = [];
  private line = '';
  private data: string[] = [];
  private afterCr = false;
  status = 0;
  headers: Headers | undefined;
  done = false;

  async read(url: string, body: unknown, headers: Record<string, string> = {}): Promise<void> {
    const res = await fetch(url, {
      method: 'POST',
      headers: { ...HEADERS, ...headers },
      body: JSON.stringify(body),
    });
    this.status = res.status;
    this.headers = res.headers;
    const decoder = new TextDecoder();
    for await (const chunk of res.body!) {
      this.bytes.push(Buffer.from(chunk));
      for (const char of decoder.decode(chunk, { stream: true })) this.take(char);
    }
    this.done = true;
  }

  text(): Buffer {
    return Buffer.concat(this.bytes);
  }

  private take(char: string): void {
    const afterCr = this.afterCr;
    this.afterCr = char === '\r';
    if (char === '\n' && afterCr) return;
    if (char !== '\r' && char !== '\n') {
      this.line += char;
      return;
    }
    const line = this.line;
    this.line = '';
    if (line === '') {
      if (this.data.length > 0)
        this.messages.push(JSON.parse(this.data.join('\n')) as Record<string, unknown>);
      this.data = [];
    } else if (line.startsWith('data:')) {
      this.data.push(line.slice(line.startsWith('data: ') ? 6 : 5));
    }
  }
}

function progress(step: number): string {
  return JSON.stringify({
    jsonrpc: '2.0',
    method: 'notifications/progress',
    params: { progressToken: 'tok', progress: step, total: 3, message: `step ${step} – ok` },
  });
}

/** Cuts `text` into pieces at the given offsets (negative: from the end). */
function cut(text: string | Buffer, ...at: number[]): Buffer[] {
  const buffer = typeof text === 'string' ? Buffer.from(text) : text;
  const points = at.map((n) => (n < 0 ? buffer.length + n : n)).sort((a, b) => a - b);
  const pieces: Buffer[] = [];
  let start = 0;
  for (const point of points) {
    pieces.push(buffer.subarray(start, point));
    start = point;
  }
  pieces.push(buffer.subarray(start));
  return pieces;
}

describe('an SSE answer cut at odd places', () => {
  let reader: StreamReader | undefined;

  const env = proxiedRawUpstream(async (res, call, write) => {
    sseHead(res);
    // Progress 1: LF line ends, cut inside "event", inside "data" and inside the JSON.
    for (const piece of cut(`event: message\ndata: ${progress(1)}\n\n`, 3, 17, 40))
      await write(piece);
    // The next event goes out only once the client has the previous one: proof of streaming.
    await until('progress 1 at the client', () => (reader?.messages.length ?? 0) >= 1);
    // A comment (keep-alive), then progress 2 with CRLF line ends, cut between CR and LF and
    // inside the "–" (3 bytes in UTF-8).
    await write(': keep-alive\n\n');
    const second = `id: 2\r\nevent: message\r\ndata: ${progress(2)}\r\n\r\n`;
    const dash = Buffer.from(second).indexOf(Buffer.from('–'));
    for (const piece of cut(second, 5, 6, dash + 1, dash + 2, -3, -1)) await write(piece);
    await until('progress 2 at the client', () => (reader?.messages.length ?? 0) >= 2);
    // Progress 3 with CR line ends, cut right after a CR.
    const third = `event: message\rdata: ${progress(3)}\r\r`;
    for (const piece of cut(third, 14, 15, -1)) await write(piece);
    await until('progress 3 at the client', () => (reader?.messages.length ?? 0) >= 3);
    // The final response over three data lines, cut inside "jsonrpc", inside the id and in the
    // middle of the blank line that ends it.
    const result = JSON.stringify({
      content: [{ type: 'text', text: `refunded ${call.order} – 42 €` }],
    });
    const final = `event: message\ndata: {"jsonrpc":"2.0",\ndata: "id":${JSON.stringify(call.id)},\ndata: "result":${result}}\n\n`;
    const euro = Buffer.from(final).indexOf(Buffer.from('€'));
    for (const piece of cut(final, 22, 45, euro + 2, -1)) await write(piece);
  });

  test('passes through event by event, byte for byte; the final response is stored and a retry replays it', async () => {
    const order = orderId('sse-cuts');
    reader = new StreamReader();
    await reader.read(
      `${env.proxy.url}/mcp`,
      toolCall(7, 'refund', { order_id: order, amount: 42 }, { _meta: { progressToken: 'tok' } }),
    );
    expect(reader.status).toBe(200);
    expect(reader.headers!.get('content-type')).toMatch(/^text\/event-stream/);
    expect(reader.text().toString('latin1')).toBe(env.upstream.written(order).toString('latin1'));
    expect(reader.messages.map((m) => m.method ?? `response ${String(m.id)}`)).toEqual([
      'notifications/progress',
      'notifications/progress',
      'notifications/progress',
      'response 7',
    ]);
    expect(
      reader.messages.slice(0, 3).map((m) => (m.params as { progress: number }).progress),
    ).toEqual([1, 2, 3]);
    const text = `refunded ${order} – 42 €`;
    expect(reader.messages[3]).toEqual({
      jsonrpc: '2.0',
      id: 7,
      result: { content: [{ type: 'text', text }] },
    });

    reader = undefined;
    const retry = await postMcp(
      `${env.proxy.url}/mcp`,
      toolCall('retry-8', 'refund', { order_id: order, amount: 42 }),
      { 'mcp-protocol-version': '2025-06-18' },
    );
    expect(retry.headers.get('content-type')).toMatch(/^application\/json/);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.messages).toEqual([
      { jsonrpc: '2.0', id: 'retry-8', result: { content: [{ type: 'text', text }] } },
    ]);
    expect(env.upstream.calls(order)).toBe(1);
  });
});

describe('a final response whose last byte is the CR that ends it', () => {
  const env = proxiedRawUpstream(async (res, call, write) => {
    sseHead(res);
    const final = JSON.stringify({
      jsonrpc: '2.0',
      id: call.id,
      result: { content: [{ type: 'text', text: `refunded ${call.order}` }] },
    });
    // CR line ends (the SSE grammar allows them); the stream ends right after the last CR.
    await write(`event: message\rdata: ${progress(1)}\r\r`);
    await write(`event: message\rdata: ${final}\r\r`);
  });

  test('is found, stored and replayed, not taken for a stream that ended early', async () => {
    const order = orderId('sse-cr');
    const reader = new StreamReader();
    await reader.read(
      `${env.proxy.url}/mcp`,
      toolCall(3, 'refund', { order_id: order, amount: 1 }),
    );
    expect(reader.messages).toEqual([
      JSON.parse(progress(1)),
      { jsonrpc: '2.0', id: 3, result: { content: [{ type: 'text', text: `refunded ${order}` }] } },
    ]);
    const retry = await postMcp(
      `${env.proxy.url}/mcp`,
      toolCall(4, 'refund', { order_id: order, amount: 1 }),
      { 'mcp-protocol-version': '2025-06-18' },
    );
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(finalMessage(retry)).toMatchObject({ id: 4, result: { content: [{ type: 'text' }] } });
    expect(env.upstream.calls(order)).toBe(1);
  });
});

describe('a server-to-client request that reuses the call id', () => {
  const env = proxiedRawUpstream(async (res, call, write) => {
    sseHead(res);
    // The server's own request under the same id as the call: JSON-RPC ids are per sender.
    const elicit = JSON.stringify({
      jsonrpc: '2.0',
      id: call.id,
      method: 'elicitation/create',
      params: {
        message: 'Refund this order?',
        requestedSchema: { type: 'object', properties: { confirm: { type: 'boolean' } } },
      },
    });
    for (const piece of cut(`event: message\ndata: ${elicit}\n\n`, 30)) await write(piece);
    // An error-free, result-free message with the id: not final either.
    await write(`data: ${JSON.stringify({ jsonrpc: '2.0', id: call.id, method: 'ping' })}\n\n`);
    await until('the client to answer the elicitation', () =>
      env.upstream.clientResponses.some((m) => m.id === call.id && m.result !== undefined),
    );
    const final = JSON.stringify({
      jsonrpc: '2.0',
      id: call.id,
      result: { content: [{ type: 'text', text: `refunded ${call.order}` }] },
    });
    for (const piece of cut(`event: message\ndata: ${final}\n\n`, 25, -1)) await write(piece);
  });

  test('is passed on and answered by the client; only the real response is stored and replayed', async () => {
    const order = orderId('sse-elicit');
    const reader = new StreamReader();
    const reading = reader.read(
      `${env.proxy.url}/mcp`,
      toolCall(5, 'refund', { order_id: order, amount: 1 }),
    );
    await until('the elicitation at the client', () => reader.messages.length >= 2);
    expect(reader.messages[0]).toMatchObject({ id: 5, method: 'elicitation/create' });
    expect(reader.messages[1]).toMatchObject({ id: 5, method: 'ping' });
    expect(reader.done).toBe(false);
    // The client's answer to the server's request passes through the proxy to the server.
    const answer = await postMcp(
      `${env.proxy.url}/mcp`,
      { jsonrpc: '2.0', id: 5, result: { action: 'accept', content: { confirm: true } } },
      { 'mcp-protocol-version': '2025-06-18' },
    );
    expect(answer.status).toBe(202);
    await reading;
    expect(reader.messages).toHaveLength(3);
    expect(reader.messages[2]).toEqual({
      jsonrpc: '2.0',
      id: 5,
      result: { content: [{ type: 'text', text: `refunded ${order}` }] },
    });

    const retry = await postMcp(
      `${env.proxy.url}/mcp`,
      toolCall(6, 'refund', { order_id: order, amount: 1 }),
      { 'mcp-protocol-version': '2025-06-18' },
    );
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.messages).toEqual([
      { jsonrpc: '2.0', id: 6, result: { content: [{ type: 'text', text: `refunded ${order}` }] } },
    ]);
    expect(env.upstream.calls(order)).toBe(1);
    expect(env.upstream.clientResponses.filter((m) => m.id === 5)).toHaveLength(1);
  });
});

describe.each([
  { json: false, label: 'SSE' },
  { json: true, label: 'JSON' },
])('a result over maxResponseBytes ($label answer, SDK server)', ({ json }) => {
  let server: McpToolServer;
  let proxy: TestProxy;
  const LIMIT = 1024;

  beforeAll(async () => {
    server = await startMcpToolServer({ sessions: false, json });
    proxy = await startProxy({
      yaml: mcpProxyYaml(server.origin).replace(
        'waitTimeout: 5s',
        `waitTimeout: 5s\n      maxResponseBytes: 1kb`,
      ),
    });
  });
  afterAll(async () => {
    await proxy?.close();
    await server?.close();
  });

  test('the first caller gets it whole; a retry gets idempotency_result_not_stored and the tool does not run again', async () => {
    // The refund echoes order_id in its result: a long one makes the result larger than the limit.
    const order = `${orderId('big')}-${'x'.repeat(3 * LIMIT)}`;
    const args = { order_id: order, amount: 9 };
    const first = await postMcp(
      `${proxy.url}/mcp`,
      toolCall(1, 'refund', args, { _meta: { progressToken: 'p' } }),
      { 'mcp-protocol-version': '2025-06-18' },
    );
    expect(first.status).toBe(200);
    expect(first.headers.get('content-type')).toMatch(
      json ? /^application\/json/ : /^text\/event-stream/,
    );
    expect(first.text.length).toBeGreaterThan(LIMIT);
    const result = finalMessage(first) as { id: unknown; result: { content: { text: string }[] } };
    expect(result.id).toBe(1);
    const refund = JSON.parse(result.result.content[0]!.text) as Record<string, unknown>;
    expect(refund).toMatchObject({ order_id: order, amount: 9 });
    expect(server.runs[server.runs.length - 1]!.refundId).toBe(refund.refund_id);
    if (!json)
      expect(first.messages.filter((m) => m.method === 'notifications/progress')).toHaveLength(3);

    for (const id of [2, 3]) {
      const retry = await postMcp(`${proxy.url}/mcp`, toolCall(id, 'refund', args), {
        'mcp-protocol-version': '2025-06-18',
      });
      expect(retry.status).toBe(200);
      expect(retry.headers.get('content-type')).toMatch(/^application\/json/);
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      const message = finalMessage(retry) as {
        id: unknown;
        error: { code: number; message: string; data: { type: string } };
      };
      expect(message.id).toBe(id);
      expect(message.error).toMatchObject({
        code: 502,
        data: { type: 'idempotency_result_not_stored' },
      });
      expect(message.error.message).toContain(`maxResponseBytes (${LIMIT})`);
    }
    expect(server.runs.filter((run) => run.args.order_id === order)).toHaveLength(1);
  });
});
