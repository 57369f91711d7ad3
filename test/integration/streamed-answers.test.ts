// A protected answer that is a stream (text/event-stream, application/x-ndjson, or chunked with no
// Content-Length) reaches the client as it arrives, is stored once whole and replayed byte for
// byte; a repeat under onConcurrent: attach joins it while it runs, on this instance or (waiting
// for the record) on another. Every claim is counted at the upstream.
import http from 'node:http';
import { startProxy, type TestProxy, uniqueTable } from '../support/proxy';
import {
  startStreamUpstream,
  type StreamScript,
  type StreamUpstream,
} from '../support/stream-upstream';
import { eventually } from '../support/eventually';
import { recordFigures } from '../support/run-report';

const SSE: StreamScript = {
  contentType: 'text/event-stream',
  pieces: Array.from({ length: 6 }, (_, i) => `id: ${i}\nevent: token\ndata: {"n":${i}}\n\n`),
  paceMs: 150,
};
const NDJSON: StreamScript = {
  contentType: 'application/x-ndjson',
  pieces: Array.from({ length: 6 }, (_, i) => `{"step":${i},"text":"part ${i}"}\n`),
  paceMs: 150,
};
const CHUNKED: StreamScript = {
  contentType: 'application/octet-stream',
  pieces: Array.from({ length: 6 }, (_, i) => `block ${i};`),
  paceMs: 150,
};

let upstream: StreamUpstream;
let proxy: TestProxy;
let second: TestProxy;
let keys = 0;

const yaml = (url: string): string => `
store: { table: "\${TEST_TABLE}" }
upstreams: { api: { url: ${url}, timeout: 2s } }
routes:
  - name: stream
    match: { path: /stream }
    upstream: api
    idempotency: { onConcurrent: attach, lockTimeout: 10s, streams: { chunked: true } }
  - { name: small, match: { path: /small }, upstream: api, idempotency: { maxResponseBytes: 64b } }
  - { name: bulk, match: { path: /bulk }, upstream: api, idempotency: { maxResponseBytes: 1mb } }
  - name: bulk-attach
    match: { path: /bulk-attach }
    upstream: api
    idempotency: { onConcurrent: attach, maxResponseBytes: 1mb }
  - { name: tools, match: { path: /mcp }, upstream: api, idempotency: { onConcurrent: attach, mcp: {} } }
  - name: typed
    match: { path: /typed }
    upstream: api
    idempotency: { streams: { contentTypes: [text/event-stream] } }
`;

beforeAll(async () => {
  upstream = await startStreamUpstream(SSE);
  const table = uniqueTable('streams');
  proxy = await startProxy({ yaml: yaml(upstream.url), table });
  second = await startProxy({ yaml: yaml(upstream.url), table });
});

afterAll(async () => {
  await proxy?.close();
  await second?.close();
  await upstream?.close();
});

beforeEach(() => {
  upstream.order.length = 0;
  upstream.received.length = 0;
  upstream.script = SSE;
});

interface Streamed {
  readonly res: http.IncomingMessage;
  readonly chunks: Buffer[];
  /** Resolves with the whole body, or rejects when the answer broke off. */
  readonly body: Promise<Buffer>;
  received(): number;
}

/** POSTs to the proxy and hands back the answer as soon as its head arrives. */
function post(
  target: TestProxy,
  path: string,
  key: string,
  options: {
    body?: string;
    onChunk?: (chunk: Buffer) => void;
    paused?: boolean;
    headers?: http.OutgoingHttpHeaders;
  } = {},
): Promise<Streamed> {
  return new Promise((resolve, reject) => {
    const payload = options.body ?? '{"ask":"stream"}';
    const req = http.request(`${target.url}${path}`, {
      method: 'POST',
      headers: {
        'idempotency-key': key,
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(payload),
        ...options.headers,
      },
    });
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      const body = new Promise<Buffer>((done, broke) => {
        res.on('data', (chunk: Buffer) => {
          chunks.push(chunk);
          options.onChunk?.(chunk);
        });
        res.on('end', () => done(Buffer.concat(chunks)));
        res.on('aborted', () => broke(new Error('aborted')));
        res.on('error', broke);
      });
      body.catch(() => undefined);
      if (options.paused === true) res.pause();
      resolve({ res, chunks, body, received: () => chunks.reduce((n, c) => n + c.length, 0) });
    });
    req.on('error', reject);
    req.end(payload);
  });
}

const whole = (script: StreamScript): string => script.pieces.join('');
const nextKey = (): string => `stream-${++keys}`;

describe.each([
  ['an event stream', SSE],
  ['an NDJSON stream', NDJSON],
  ['a chunked answer with no Content-Length', CHUNKED],
])('%s', (_name, script) => {
  test('reaches the client before the upstream has ended, and is replayed byte for byte', async () => {
    upstream.script = script;
    const key = nextKey();
    let first = true;
    const answer = await post(proxy, '/stream', key, {
      onChunk: () => {
        if (first) upstream.order.push('client:first-byte');
        first = false;
      },
    });
    expect((await answer.body).toString()).toBe(whole(script));
    expect(answer.res.headers['content-length']).toBeUndefined();
    // Ordering, not timing: the first byte was in the client's hands while the upstream still sent.
    const order = upstream.order;
    expect(order.indexOf('client:first-byte')).toBeGreaterThan(order.indexOf('upstream:sent:0'));
    expect(order.indexOf('client:first-byte')).toBeLessThan(order.indexOf('upstream:end'));

    const replay = await post(proxy, '/stream', key);
    const replayed = await replay.body;
    expect(replay.res.headers['idempotent-replayed']).toBe('true');
    expect(replay.res.headers['content-type']).toBe(answer.res.headers['content-type']);
    expect(replayed.equals(await answer.body)).toBe(true);
    expect(upstream.executions()).toHaveLength(1);
    const line = proxy.logs.find((entry) => entry.key === key && entry.outcome === 'executed');
    expect(line?.firstByteMs).toEqual(expect.any(Number));
    expect(line?.streamedBytes).toBe(whole(script).length);
    const metrics = await proxy.metrics.registry.metrics();
    expect(metrics).toMatch(
      /^idempotency_proxy_stream_first_byte_seconds_count\{route="stream"\} [1-9]/m,
    );
  });
});

test('a chunked answer of another type is kept whole by default, and sent with its length', async () => {
  upstream.script = CHUNKED;
  const key = nextKey();
  let first = true;
  const answer = await post(proxy, '/typed', key, {
    onChunk: () => {
      if (first) upstream.order.push('client:first-byte');
      first = false;
    },
  });
  expect((await answer.body).toString()).toBe(whole(CHUNKED));
  expect(answer.res.headers['content-length']).toBe(String(whole(CHUNKED).length));
  expect(upstream.order.indexOf('client:first-byte')).toBeGreaterThan(
    upstream.order.indexOf('upstream:end'),
  );
});

test('a repeat attaches to the running stream: what was sent so far, then the rest live', async () => {
  const key = nextKey();
  const open = upstream.gate(2);
  const first = await post(proxy, '/stream', key);
  const sofar = SSE.pieces.slice(0, 3).join('');
  await eventually(() => expect(first.received()).toBe(sofar.length));
  const repeat = await post(proxy, '/stream', key);
  await eventually(() => expect(repeat.received()).toBe(sofar.length));
  expect(Buffer.concat(repeat.chunks).toString()).toBe(sofar);
  expect(upstream.order).not.toContain('upstream:end');
  open();
  const [firstBody, repeatBody] = await Promise.all([first.body, repeat.body]);
  expect(firstBody.toString()).toBe(whole(SSE));
  expect(repeatBody.equals(firstBody)).toBe(true);
  expect(repeat.res.headers['idempotent-replayed']).toBe('true');
  expect(repeat.res.headers['content-type']).toBe('text/event-stream');
  expect(upstream.executions()).toHaveLength(1);
  await eventually(() =>
    expect(proxy.logs.filter((entry) => entry.key === key).map((e) => e.outcome)).toEqual(
      expect.arrayContaining(['executed', 'attached']),
    ),
  );
});

test('a repeat with another payload, while the stream runs, is refused 422', async () => {
  const key = nextKey();
  const open = upstream.gate(1);
  const first = await post(proxy, '/stream', key);
  await eventually(() => expect(first.received()).toBeGreaterThan(0));
  const other = await post(proxy, '/stream', key, { body: '{"ask":"something else"}' });
  expect(other.res.statusCode).toBe(422);
  open();
  expect((await first.body).toString()).toBe(whole(SSE));
  expect(upstream.executions()).toHaveLength(1);
});

test('a repeat on another instance waits for the record and gets the whole body', async () => {
  const key = nextKey();
  const open = upstream.gate(2);
  const first = await post(proxy, '/stream', key);
  await eventually(() => expect(first.received()).toBeGreaterThan(0));
  const elsewhere = post(second, '/stream', key);
  // Time for it to reach the record mid-stream; its log line's waitMs below proves it did.
  await new Promise((resolve) => setTimeout(resolve, 300));
  open();
  const waited = await elsewhere;
  const [firstBody, waitedBody] = await Promise.all([first.body, waited.body]);
  recordFigures(__filename, 'a repeat on another instance', {
    answeredAfterUpstreamEndMs: performance.now() - upstream.endedAt()!,
  });
  expect(waitedBody.equals(firstBody)).toBe(true);
  expect(waited.res.headers['idempotent-replayed']).toBe('true');
  expect(upstream.executions()).toHaveLength(1);
  const line = second.logs.find((entry) => entry.key === key);
  expect(line?.waitMs).toBeGreaterThan(0);
});

test('an attached repeat of a stream that breaks off is cut too; a retry gets the unknown outcome', async () => {
  upstream.script = { ...SSE, breakAfter: 3 };
  const key = nextKey();
  const open = upstream.gate(1);
  const first = await post(proxy, '/stream', key);
  await eventually(() => expect(first.received()).toBeGreaterThan(0));
  const repeat = await post(proxy, '/stream', key);
  await eventually(() => expect(repeat.received()).toBe(first.received()));
  open();
  await expect(first.body).rejects.toThrow('aborted');
  await expect(repeat.body).rejects.toThrow('aborted');
  const retry = await post(proxy, '/stream', key);
  expect(retry.res.headers['idempotency-outcome']).toBe('unknown');
  expect(upstream.executions()).toHaveLength(1);
});

test('a stream that stalls past the upstream timeout is cut, and its outcome is unknown', async () => {
  upstream.script = { ...SSE, stallAfter: 1 };
  const key = nextKey();
  const first = await post(proxy, '/stream', key);
  await expect(first.body).rejects.toThrow('aborted');
  const sent = SSE.pieces.slice(0, 2).join('');
  expect(Buffer.concat(first.chunks).toString()).toBe(sent);
  // The operator's record of how far it got: the log line of the call that was cut.
  const line = proxy.logs.find((entry) => entry.key === key);
  expect(line).toMatchObject({ outcomeUnknown: true, streamedBytes: sent.length });
  const retry = await post(proxy, '/stream', key);
  expect(retry.res.statusCode).toBe(504);
  expect(retry.res.headers['idempotency-outcome']).toBe('unknown');
  expect(upstream.executions()).toHaveLength(1);
});

test('a stream larger than maxResponseBytes is delivered whole, and replayed without its body', async () => {
  const key = nextKey();
  const answer = await post(proxy, '/small', key);
  expect((await answer.body).toString()).toBe(whole(SSE));
  const replay = await post(proxy, '/small', key);
  expect((await replay.body).length).toBe(0);
  expect(replay.res.headers['idempotent-body-omitted']).toBe('true');
  expect(upstream.executions()).toHaveLength(1);
});

test('a client that goes away mid-stream does not stop the call, and the stream is still stored', async () => {
  const key = nextKey();
  const open = upstream.gate(1);
  const first = await post(proxy, '/stream', key);
  await eventually(() => expect(first.received()).toBeGreaterThan(0));
  first.res.destroy();
  open();
  await eventually(() => expect(upstream.order).toContain('upstream:end'));
  await eventually(async () => {
    const replay = await post(proxy, '/stream', key);
    expect(replay.res.headers['idempotent-replayed']).toBe('true');
    expect((await replay.body).toString()).toBe(whole(SSE));
  });
  expect(upstream.executions()).toHaveLength(1);
});

test('a client that reads slowly holds the upstream back: the proxy never buffers the stream', async () => {
  const piece = `${JSON.stringify({ fill: 'x'.repeat(64 * 1024 - 12) })}\n`;
  const pieces = 1024; // 64 MiB
  upstream.script = {
    contentType: 'application/x-ndjson',
    pieces: Array(pieces).fill(piece),
    paceMs: 0,
  };
  const key = nextKey();
  const slow = await post(proxy, '/bulk', key, { paused: true });
  const sent = (): number =>
    upstream.order.filter((step) => step.startsWith('upstream:sent')).length;
  // Wait until the upstream is held back (no piece sent for a while), then look at how far it got.
  let last = -1;
  while (sent() !== last) {
    last = sent();
    await new Promise((resolve) => setTimeout(resolve, 300));
  }
  // Socket buffers on both sides and one high-water mark in between, not the 64 MiB stream.
  expect(last * piece.length).toBeLessThan(16 * 1024 * 1024);
  expect(last).toBeLessThan(pieces);
  slow.res.resume();
  expect((await slow.body).length).toBe(pieces * piece.length);
  expect(upstream.executions()).toHaveLength(1);
  const replay = await post(proxy, '/bulk', key);
  expect(replay.res.headers['idempotent-body-omitted']).toBe('true');
});

test('an attached repeat that reads slowly is cut off once it falls too far behind; the first is not held back', async () => {
  const piece = `${JSON.stringify({ fill: 'y'.repeat(64 * 1024 - 12) })}\n`;
  const pieces = 256; // 16 MiB
  upstream.script = {
    contentType: 'application/x-ndjson',
    pieces: Array(pieces).fill(piece),
    paceMs: 0,
  };
  const key = nextKey();
  const open = upstream.gate(2);
  const first = await post(proxy, '/bulk-attach', key);
  await eventually(() => expect(first.received()).toBe(3 * piece.length));
  const slow = await post(proxy, '/bulk-attach', key, { paused: true });
  expect(slow.res.headers['idempotent-replayed']).toBe('true');
  open();
  expect((await first.body).length).toBe(pieces * piece.length);
  slow.res.resume();
  await expect(slow.body).rejects.toThrow('aborted');
  expect(slow.received()).toBeLessThan(pieces * piece.length);
  expect(upstream.executions()).toHaveLength(1);
});

describe('an MCP tool call', () => {
  const call = (id: number): string =>
    JSON.stringify({
      jsonrpc: '2.0',
      id,
      method: 'tools/call',
      params: { name: 'refund', arguments: { order: 42 } },
    });
  const progress = (n: number): string =>
    `event: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p","progress":${n}}}\n\n`;
  const MCP: StreamScript = {
    contentType: 'text/event-stream',
    pieces: [
      progress(1),
      // A request of the server's own: for the first caller only.
      'event: message\ndata: {"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{}}\n\n',
      progress(2),
      progress(3),
      'event: message\ndata: {"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"refunded"}]}}\n\n',
    ],
    paceMs: 100,
  };
  const headers = { accept: 'application/json, text/event-stream' };

  test('a retry attaches: the notifications so far and live, then the result under its own id', async () => {
    upstream.script = MCP;
    const key = nextKey();
    const open = upstream.gate(2);
    const first = await post(proxy, '/mcp', key, { body: call(1), headers });
    await eventually(() => expect(first.received()).toBe(MCP.pieces.slice(0, 3).join('').length));
    const retry = await post(proxy, '/mcp', key, { body: call(2), headers });
    await eventually(() =>
      expect(Buffer.concat(retry.chunks).toString()).toBe(progress(1) + progress(2)),
    );
    open();
    const [firstBody, retryBody] = await Promise.all([first.body, retry.body]);
    expect(firstBody.toString()).toBe(MCP.pieces.join(''));
    expect(retryBody.toString()).toBe(
      `${progress(1)}${progress(2)}${progress(3)}event: message\ndata: {"jsonrpc":"2.0","id":2,"result":{"content":[{"text":"refunded","type":"text"}]}}\n\n`,
    );
    // The result as the record keeps it (canonical JSON), as a later replay gets it too.
    const replay = await post(proxy, '/mcp', key, { body: call(3), headers });
    expect(JSON.parse((await replay.body).toString())).toEqual({
      jsonrpc: '2.0',
      id: 3,
      result: { content: [{ type: 'text', text: 'refunded' }] },
    });
    expect(retry.res.headers['idempotent-replayed']).toBe('true');
    expect(upstream.executions()).toHaveLength(1);
  });
});
