// MCP routes (src/mcp/README.md) on the wire: raw JSON-RPC over fetch for the exact shapes — key
// sources, the replay's id and headers, the JSON-RPC errors (409/422/502/503, never problem+json),
// non-final answers released, batches, pass-through GET/DELETE — and the 2026-07-28 revision with
// the SDK v2 client. Upstream executions are counted for every "runs once".
import http from 'node:http';
import {
  finalMessage,
  postMcp,
  rawHandshake,
  type RawMcpResponse,
  toolCall,
} from '../support/mcp-client';
import {
  connectModernClient,
  MODERN_REVISION,
  startModernToolServer,
} from '../support/mcp-modern-server';
import { eventually } from '../support/eventually';
import { mcpProxyYaml, orderId, startMcpProxy } from '../support/mcp-proxy';
import { type McpToolServer, startMcpToolServer } from '../support/mcp-tool-server';
import { databaseUrl, startProxy, type TestProxy } from '../support/proxy';
import { startTcpForwarder } from '../support/tcp-forwarder';
import { startUpstream } from '../support/upstream';

let server: McpToolServer;
let jsonServer: McpToolServer;
let proxy: TestProxy;
let jsonProxy: TestProxy;

beforeAll(async () => {
  server = await startMcpToolServer({ sessions: false, json: false });
  jsonServer = await startMcpToolServer({ sessions: false, json: true });
  proxy = await startMcpProxy(server.origin);
  jsonProxy = await startMcpProxy(jsonServer.origin);
});
afterAll(async () => {
  await proxy?.close();
  await jsonProxy?.close();
  await server?.close();
  await jsonServer?.close();
});

const HEADERS = { 'mcp-protocol-version': '2025-06-18' };

function runsOf(target: McpToolServer, order: string): number {
  return target.runs.filter((run) => run.args.order_id === order).length;
}

async function untilRuns(target: McpToolServer, order: string, count: number): Promise<void> {
  await eventually(
    () => {
      if (runsOf(target, order) < count)
        throw new Error(`${order} ran ${runsOf(target, order)} times, not ${count}`);
    },
    { intervalMs: 10 },
  );
}

function expectJsonRpcError(
  res: RawMcpResponse,
  id: unknown,
  code: number,
  type: string,
): Record<string, unknown> {
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^application\/json/);
  const message = finalMessage(res);
  expect(message).toMatchObject({ jsonrpc: '2.0', id, error: { code, data: { type } } });
  expect(typeof (message.error as { message?: unknown }).message).toBe('string');
  return message;
}

test('a raw retry with another JSON-RPC id gets the stored response under its own id, marked replayed', async () => {
  const order = orderId('wire-replay');
  const first = await postMcp(
    `${proxy.url}/mcp`,
    toolCall(1, 'refund', { order_id: order, amount: 5 }, { _meta: { progressToken: 'p1' } }),
    HEADERS,
  );
  expect(first.status).toBe(200);
  expect(first.headers.get('content-type')).toMatch(/^text\/event-stream/);
  expect(first.messages.filter((m) => m.method === 'notifications/progress')).toHaveLength(3);
  const stored = finalMessage(first);

  const retry = await postMcp(
    `${proxy.url}/mcp`,
    toolCall(
      'retry-2',
      'refund',
      { order_id: order, amount: 5 },
      { _meta: { progressToken: 'p2' } },
    ),
    HEADERS,
  );
  expect(retry.status).toBe(200);
  expect(retry.headers.get('content-type')).toMatch(/^application\/json/);
  expect(retry.headers.get('idempotent-replayed')).toBe('true');
  expect(JSON.parse(retry.text)).toEqual({ ...stored, id: 'retry-2' });
  expect(runsOf(server, order)).toBe(1);
});

test('the Idempotency-Key header wins: another key with the same arguments runs again', async () => {
  const order = orderId('wire-header');
  const call = (id: number, key: string) =>
    postMcp(`${proxy.url}/mcp`, toolCall(id, 'refund', { order_id: order, amount: 1 }), {
      ...HEADERS,
      'idempotency-key': key,
    });
  await call(1, `${order}-a`);
  const replay = await call(2, `${order}-a`);
  expect(replay.headers.get('idempotent-replayed')).toBe('true');
  await call(3, `${order}-b`);
  expect(runsOf(server, order)).toBe(2);
  const received = server.received.filter(
    (r) =>
      (r.json as { params?: { arguments?: { order_id?: string } } })?.params?.arguments
        ?.order_id === order,
  );
  expect(received.map((r) => r.headers['idempotency-key'])).toEqual([`${order}-a`, `${order}-b`]);
});

test('params.idempotencyKey is a key: the same key replays, another key with the same arguments runs again', async () => {
  const order = orderId('wire-param');
  const call = (id: number, key: string) =>
    postMcp(
      `${proxy.url}/mcp`,
      toolCall(id, 'refund', { order_id: order, amount: 1 }, { idempotencyKey: key }),
      HEADERS,
    );
  const first = await call(1, `${order}-a`);
  const replay = await call(2, `${order}-a`);
  expect(JSON.parse(replay.text)).toEqual({ ...finalMessage(first), id: 2 });
  await call(3, `${order}-b`);
  expect(runsOf(server, order)).toBe(2);
});

test('the derived key ignores the JSON-RPC id and _meta', async () => {
  const order = orderId('wire-derived');
  for (const [id, token] of [
    [1, 'a'],
    ['x', 'b'],
    [3, 'c'],
  ] as const) {
    const res = await postMcp(
      `${proxy.url}/mcp`,
      toolCall(id, 'refund', { order_id: order, amount: 2 }, { _meta: { progressToken: token } }),
      HEADERS,
    );
    expect(finalMessage(res)).toMatchObject({ id, result: {} });
  }
  expect(runsOf(server, order)).toBe(1);
});

test('a header key reused with other arguments: 422 JSON-RPC error, and the corrected retry still replays', async () => {
  const order = orderId('wire-422');
  const headers = { ...HEADERS, 'idempotency-key': order };
  const first = await postMcp(
    `${proxy.url}/mcp`,
    toolCall(1, 'refund', { order_id: order, amount: 1 }),
    headers,
  );
  const conflict = await postMcp(
    `${proxy.url}/mcp`,
    toolCall(2, 'refund', { order_id: order, amount: 2 }),
    headers,
  );
  expectJsonRpcError(conflict, 2, 422, 'idempotency_key_conflict');
  const corrected = await postMcp(
    `${proxy.url}/mcp`,
    toolCall(3, 'refund', { order_id: order, amount: 1 }),
    headers,
  );
  expect(JSON.parse(corrected.text)).toEqual({ ...finalMessage(first), id: 3 });
  expect(runsOf(server, order)).toBe(1);
});

test('reject mode: a duplicate while the first runs gets 409 idempotency_key_in_progress with retryAfter', async () => {
  const order = orderId('wire-409');
  const args = { order_id: order, amount: 1, delay_ms: 600 };
  const first = postMcp(`${proxy.url}/reject-mcp`, toolCall(1, 'refund', args), HEADERS);
  await untilRuns(server, order, 1);
  const duplicate = await postMcp(`${proxy.url}/reject-mcp`, toolCall(2, 'refund', args), HEADERS);
  const error = expectJsonRpcError(duplicate, 2, 409, 'idempotency_key_in_progress');
  expect((error.error as { data: { retryAfter: number } }).data.retryAfter).toBeGreaterThanOrEqual(
    1,
  );
  expect(finalMessage(await first)).toMatchObject({ id: 1, result: {} });
  expect(runsOf(server, order)).toBe(1);
});

test('wait mode: concurrent duplicates run once and all get the same result', async () => {
  const order = orderId('wire-wait');
  const args = { order_id: order, amount: 1, delay_ms: 300 };
  const answers = await Promise.all(
    [1, 2, 3, 4, 5].map((id) =>
      postMcp(`${jsonProxy.url}/mcp`, toolCall(id, 'refund', args), HEADERS),
    ),
  );
  const results = answers.map((res) => finalMessage(res).result);
  for (const result of results) expect(result).toEqual(results[0]);
  expect(answers.map((res) => finalMessage(res).id)).toEqual([1, 2, 3, 4, 5]);
  expect(answers.filter((res) => res.headers.get('idempotent-replayed') === 'true')).toHaveLength(
    4,
  );
  expect(runsOf(jsonServer, order)).toBe(1);
});

test('a JSON-RPC error or an HTTP 4xx from upstream is not final: the retry runs again', async () => {
  let calls = 0;
  const scripted = await startUpstream((req, res) => {
    const body = JSON.parse(req.body.toString('utf8') || 'null') as {
      id?: unknown;
      method?: string;
    } | null;
    if (body?.method !== 'tools/call') {
      res.writeHead(202).end();
      return;
    }
    calls += 1;
    if (calls === 1) {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({ jsonrpc: '2.0', id: body.id, error: { code: -32603, message: 'busy' } }),
      );
    } else if (calls === 2) {
      res.writeHead(400, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({ jsonrpc: '2.0', id: body.id, error: { code: -32600, message: 'bad' } }),
      );
    } else {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          jsonrpc: '2.0',
          id: body.id,
          result: { content: [{ type: 'text', text: `ran ${calls}` }] },
        }),
      );
    }
  });
  const scriptedProxy = await startMcpProxy(scripted.url);
  try {
    const call = (id: number) =>
      postMcp(
        `${scriptedProxy.url}/mcp`,
        toolCall(id, 'refund', { order_id: 'o', amount: 1 }),
        HEADERS,
      );
    expect(finalMessage(await call(1))).toMatchObject({ id: 1, error: { code: -32603 } });
    expect((await call(2)).status).toBe(400);
    expect(finalMessage(await call(3))).toMatchObject({
      id: 3,
      result: { content: [{ text: 'ran 3' }] },
    });
    const replay = await call(4);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(finalMessage(replay)).toMatchObject({ id: 4, result: { content: [{ text: 'ran 3' }] } });
    expect(calls).toBe(3);
  } finally {
    await scriptedProxy.close();
    await scripted.close();
  }
});

test('a batch containing a protected tools/call gets -32600 and nothing is forwarded', async () => {
  const before = server.received.length;
  const res = await postMcp(
    `${proxy.url}/mcp`,
    [
      toolCall(1, 'refund', { order_id: orderId('batch'), amount: 1 }),
      { jsonrpc: '2.0', id: 2, method: 'tools/list' },
    ],
    HEADERS,
  );
  expect(res.status).toBe(200);
  expect(res.messages.length).toBeGreaterThan(0);
  for (const message of res.messages)
    expect(message).toMatchObject({ jsonrpc: '2.0', error: { code: -32600 } });
  expect(server.received.length).toBe(before);
});

test('a batch without a protected tools/call passes through', async () => {
  const account = orderId('batch-acct');
  const res = await postMcp(
    `${proxy.url}/mcp`,
    [{ jsonrpc: '2.0', id: 1, method: 'tools/list' }, toolCall(2, 'get_balance', { account })],
    HEADERS,
  );
  expect(res.status).toBe(200);
  expect(
    res.messages
      .filter((m) => 'id' in m && !('method' in m))
      .map((m) => m.id)
      .sort(),
  ).toEqual([1, 2]);
  expect(server.received.some((r) => Array.isArray(r.json))).toBe(true);
  expect(server.runs.filter((run) => run.args.account === account)).toHaveLength(1);
});

test('an unlisted tool runs on every call, and gets its Idempotency-Key header as sent', async () => {
  const account = orderId('unlisted-key');
  const headers = { ...HEADERS, 'idempotency-key': `key-${account}` };
  for (const id of [1, 2]) {
    const res = await postMcp(
      `${proxy.url}/mcp`,
      toolCall(id, 'get_balance', { account }),
      headers,
    );
    expect(finalMessage(res)).toMatchObject({ id, result: {} });
    expect(res.headers.get('idempotent-replayed')).toBeNull();
  }
  expect(server.runs.filter((run) => run.args.account === account)).toHaveLength(2);
  const calls = server.received.filter(
    (r) =>
      (r.json as { params?: { arguments?: { account?: string } } })?.params?.arguments?.account ===
      account,
  );
  expect(calls.map((r) => r.headers['idempotency-key'])).toEqual([
    `key-${account}`,
    `key-${account}`,
  ]);
});

describe('upstream drops the stream after the tool ran', () => {
  test('unknownOutcome: fail (JSON answer) → 502 idempotency_outcome_unknown, stored and replayed, never forwarded again', async () => {
    const order = orderId('drop-json');
    const args = { order_id: order, amount: 1, drop_stream: true };
    const first = await postMcp(`${jsonProxy.url}/mcp`, toolCall(1, 'refund', args), HEADERS);
    expectJsonRpcError(first, 1, 502, 'idempotency_outcome_unknown');
    const repeat = await postMcp(`${jsonProxy.url}/mcp`, toolCall(2, 'refund', args), HEADERS);
    expectJsonRpcError(repeat, 2, 502, 'idempotency_outcome_unknown');
    expect(runsOf(jsonServer, order)).toBe(1);
  });

  test('unknownOutcome: fail (SSE answer) → no result for the first caller; repeats get 502 idempotency_outcome_unknown', async () => {
    const order = orderId('drop-sse');
    const args = { order_id: order, amount: 1, drop_stream: true };
    const first = await postMcp(`${proxy.url}/mcp`, toolCall(1, 'refund', args), HEADERS).catch(
      () => undefined,
    );
    if (first) expect(first.messages.some((m) => 'result' in m)).toBe(false);
    const repeat = await postMcp(`${proxy.url}/mcp`, toolCall(2, 'refund', args), HEADERS);
    expectJsonRpcError(repeat, 2, 502, 'idempotency_outcome_unknown');
    expect(runsOf(server, order)).toBe(1);
  });

  test('unknownOutcome: retry → in progress until the lease ends, then a repeat forwards again', async () => {
    const order = orderId('drop-retry');
    const args = { order_id: order, amount: 1, drop_stream: true };
    await postMcp(`${jsonProxy.url}/retry-mcp`, toolCall(1, 'refund', args), HEADERS).catch(
      () => undefined,
    );
    const soon = await postMcp(`${jsonProxy.url}/retry-mcp`, toolCall(2, 'refund', args), HEADERS);
    expectJsonRpcError(soon, 2, 409, 'idempotency_key_in_progress');
    // Retried until the lease has run out and a retry runs the tool again.
    await eventually(
      async () => {
        await postMcp(`${jsonProxy.url}/retry-mcp`, toolCall(3, 'refund', args), HEADERS).catch(
          () => undefined,
        );
        expect(runsOf(jsonServer, order)).toBe(2);
      },
      { intervalMs: 100 },
    );
  });
});

test('store down: 503 idempotency_store_unavailable as a JSON-RPC error, nothing forwarded; initialize still passes', async () => {
  const database = new URL(databaseUrl());
  const forwarder = await startTcpForwarder({
    host: database.hostname,
    port: Number(database.port || 5432),
  });
  const via = new URL(database.toString());
  via.hostname = '127.0.0.1';
  via.port = String(forwarder.port);
  const outageProxy = await startProxy({
    yaml: mcpProxyYaml(jsonServer.origin),
    databaseUrl: via.toString(),
  });
  try {
    const closed = http.createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const closedPort = (closed.address() as { port: number }).port;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    forwarder.switchTo({ host: '127.0.0.1', port: closedPort });
    forwarder.drop();
    const order = orderId('store-down');
    const res = await postMcp(
      `${outageProxy.url}/mcp`,
      toolCall(5, 'refund', { order_id: order, amount: 1 }),
      HEADERS,
    );
    expectJsonRpcError(res, 5, 503, 'idempotency_store_unavailable');
    expect(runsOf(jsonServer, order)).toBe(0);
    await expect(rawHandshake(`${outageProxy.url}/mcp`)).resolves.toBeDefined();
  } finally {
    await outageProxy.close().catch(() => undefined);
    await forwarder.close();
  }
});

test('GET and DELETE pass through with Mcp-Session-Id and MCP-Protocol-Version as sent', async () => {
  const sessionServer = await startMcpToolServer({ sessions: true, json: false });
  const sessionProxy = await startMcpProxy(sessionServer.origin);
  try {
    const headers = await rawHandshake(`${sessionProxy.url}/mcp`);
    const sessionId = headers['mcp-session-id'];
    expect(sessionId).toBeTruthy();
    const abort = new AbortController();
    const stream = await fetch(`${sessionProxy.url}/mcp`, {
      headers: { ...headers, accept: 'text/event-stream' },
      signal: abort.signal,
    });
    expect(stream.status).toBe(200);
    expect(stream.headers.get('content-type')).toMatch(/^text\/event-stream/);
    abort.abort();
    const deleted = await fetch(`${sessionProxy.url}/mcp`, { method: 'DELETE', headers });
    expect(deleted.status).toBe(200);
    for (const method of ['GET', 'DELETE']) {
      const request = sessionServer.received.find((r) => r.method === method);
      expect(request?.headers).toMatchObject({
        'mcp-session-id': sessionId,
        'mcp-protocol-version': '2025-06-18',
      });
    }
  } finally {
    await sessionProxy.close();
    await sessionServer.close();
  }
});

test('protocol revision 2026-07-28 (SDK v2 client and server): a repeated call runs once; headers reach the server as sent', async () => {
  const modern = await startModernToolServer();
  const modernProxy = await startMcpProxy(modern.origin);
  try {
    const client = await connectModernClient(`${modernProxy.url}/mcp`);
    const args = { order_id: orderId('modern'), amount: 3 };
    const first = await client.callTool({ name: 'refund', arguments: args });
    const second = await client.callTool({
      name: 'refund',
      arguments: { ...args, trace_id: 'other' },
    });
    await client.close();
    expect(second).toEqual(first);
    expect(modern.executions()).toBe(1);
    const calls = modern.received.filter((r) => r.headers['mcp-method'] === 'tools/call');
    expect(calls).toHaveLength(1);
    expect(calls[0]?.headers).toMatchObject({
      'mcp-protocol-version': MODERN_REVISION,
      'mcp-name': 'refund',
    });
    expect(modern.received.some((r) => r.headers['mcp-method'] === 'server/discover')).toBe(true);
  } finally {
    await modernProxy.close();
    await modern.close();
  }
});
