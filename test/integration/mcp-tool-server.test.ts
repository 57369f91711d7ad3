// The MCP tool server fixture against the official SDK client, with no proxy in between: every
// tool is counted, in stateless and session mode, answering as SSE and as JSON; progress arrives;
// `drop_stream` loses the answer after the side effect. The MCP route tests rely on all of it.
import {
  connectMcpClient,
  finalMessage,
  postMcp,
  rawHandshake,
  resultText,
  toolCall,
} from '../support/mcp-client';
import {
  type McpToolServer,
  startMcpToolServer,
  TOOL_SERVER_MODES,
} from '../support/mcp-tool-server';

const modes = TOOL_SERVER_MODES;

describe.each(modes)('tool server (sessions: $sessions, json: $json)', (mode) => {
  let server: McpToolServer;

  beforeEach(async () => {
    server = await startMcpToolServer(mode);
  });
  afterEach(async () => {
    await server.close();
  });

  test('counts every execution of every tool, each with its own result', async () => {
    const { client, close } = await connectMcpClient(server.url);
    try {
      const tools = await client.listTools();
      expect(tools.tools.map((tool) => tool.name).sort()).toEqual([
        'fail_refund',
        'get_balance',
        'refund',
        'refund_partial',
      ]);

      const first = await client.callTool({
        name: 'refund',
        arguments: { order_id: 'o-1', amount: 5 },
      });
      const second = await client.callTool({
        name: 'refund',
        arguments: { order_id: 'o-1', amount: 5 },
      });
      expect(resultText(first)).not.toBe(resultText(second));
      expect(JSON.parse(resultText(first))).toMatchObject({ order_id: 'o-1', amount: 5 });

      const balance = await client.callTool({ name: 'get_balance', arguments: { account: 'a-1' } });
      expect(JSON.parse(resultText(balance))).toMatchObject({ account: 'a-1', balance: 100 });

      const failed = await client.callTool({ name: 'fail_refund', arguments: { order_id: 'o-2' } });
      expect(failed.isError).toBe(true);

      expect(server.executions('refund')).toBe(2);
      expect(server.executions('get_balance')).toBe(1);
      expect(server.executions('fail_refund')).toBe(1);
      expect(server.toolCalls('refund')).toHaveLength(2);
    } finally {
      await close();
    }
  });

  test('records the headers it received: session id and protocol version as the client sent them', async () => {
    const headers = await rawHandshake(server.url);
    expect(Boolean(headers['mcp-session-id'])).toBe(mode.sessions);
    const res = await postMcp(server.url, toolCall(7, 'refund', { order_id: 'o-3', amount: 1 }), {
      ...headers,
      'idempotency-key': 'k-raw',
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toContain(
      mode.json ? 'application/json' : 'text/event-stream',
    );
    expect(finalMessage(res)).toMatchObject({
      jsonrpc: '2.0',
      id: 7,
      result: { content: [{ type: 'text' }] },
    });

    const call = server.received.find(
      (request) => (request.json as { id?: unknown } | undefined)?.id === 7,
    );
    expect(call?.headers).toMatchObject({
      'idempotency-key': 'k-raw',
      'mcp-protocol-version': '2025-06-18',
    });
    if (mode.sessions) expect(call?.headers['mcp-session-id']).toBe(headers['mcp-session-id']);
    else expect(call?.headers['mcp-session-id']).toBeUndefined();
  });

  test('drop_stream: the refund runs, the answer never arrives', async () => {
    const headers = await rawHandshake(server.url);
    await expect(
      postMcp(
        server.url,
        toolCall(9, 'refund', { order_id: 'o-drop', amount: 1, drop_stream: true }),
        headers,
      ),
    ).rejects.toThrow();
    expect(server.executions('refund')).toBe(1);
  });
});

describe.each(modes.filter((mode) => !mode.json))('progress (sessions: $sessions, SSE)', (mode) => {
  test('progress notifications reach the caller while the refund waits', async () => {
    const server = await startMcpToolServer(mode);
    const { client, close } = await connectMcpClient(server.url);
    try {
      const progress: number[] = [];
      const result = await client.callTool(
        { name: 'refund', arguments: { order_id: 'o-p', amount: 2, delay_ms: 150 } },
        undefined,
        {
          onprogress: (event) => progress.push(event.progress),
        },
      );
      expect(progress).toEqual([1, 2, 3]);
      expect(JSON.parse(resultText(result))).toMatchObject({ order_id: 'o-p' });
      expect(server.executions('refund')).toBe(1);
    } finally {
      await close();
      await server.close();
    }
  });

  test('a raw SSE answer carries the progress events before the result', async () => {
    const server = await startMcpToolServer(mode);
    try {
      const headers = await rawHandshake(server.url);
      const res = await postMcp(
        server.url,
        toolCall(
          'p-1',
          'refund',
          { order_id: 'o-raw-p', amount: 2 },
          { _meta: { progressToken: 'tok' } },
        ),
        headers,
      );
      expect(res.messages.map((message) => message.method ?? 'response')).toEqual([
        'notifications/progress',
        'notifications/progress',
        'notifications/progress',
        'response',
      ]);
      expect(res.messages[0]).toMatchObject({
        params: { progressToken: 'tok', progress: 1, total: 3 },
      });
    } finally {
      await server.close();
    }
  });
});

test('a client call that times out before the tool finishes still ran the tool once', async () => {
  const server = await startMcpToolServer({ sessions: false, json: false });
  const { client, close } = await connectMcpClient(server.url);
  try {
    await expect(
      client.callTool(
        { name: 'refund', arguments: { order_id: 'o-slow', amount: 1, delay_ms: 600 } },
        undefined,
        {
          timeout: 100,
        },
      ),
    ).rejects.toThrow(/timed out/i);
    await server.untilExecutions(1, 'refund');
    expect(server.executions('refund')).toBe(1);
  } finally {
    await close();
    await server.close();
  }
});
