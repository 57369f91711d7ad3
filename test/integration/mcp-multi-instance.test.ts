// MCP routes (src/mcp/README.md) through two proxy instances sharing one PostgreSQL table: SDK
// clients on both fire the same tool call at once; the tool server runs it once and every caller
// gets the same result.
import {
  connectMcpClient,
  finalMessage,
  postMcp,
  rawHandshake,
  resultText,
  toolCall,
} from '../support/mcp-client';
import { orderId, startMcpProxy } from '../support/mcp-proxy';
import { type McpToolServer, startMcpToolServer } from '../support/mcp-tool-server';
import { type TestProxy, uniqueTable } from '../support/proxy';

describe.each([
  { sessions: false, json: false },
  { sessions: true, json: true },
] as const)('two proxies, one store (sessions: $sessions, json: $json)', (mode) => {
  let server: McpToolServer;
  let proxies: TestProxy[];

  beforeAll(async () => {
    server = await startMcpToolServer(mode);
    const table = uniqueTable('mcp');
    proxies = [
      await startMcpProxy(server.origin, { table }),
      await startMcpProxy(server.origin, { table }),
    ];
  });
  afterAll(async () => {
    for (const proxy of proxies ?? []) await proxy.close();
    await server?.close();
  });

  test('concurrent duplicate SDK calls through both instances run once', async () => {
    const order = orderId('multi');
    const args = { order_id: order, amount: 9, delay_ms: 300 };
    const clients = await Promise.all(
      [0, 1, 0, 1, 0, 1].map((i) => connectMcpClient(`${proxies[i]!.url}/mcp`)),
    );
    try {
      const results = await Promise.all(
        clients.map(({ client }) => client.callTool({ name: 'refund', arguments: args })),
      );
      for (const result of results) expect(result).toEqual(results[0]);
      const runs = server.runs.filter((run) => run.args.order_id === order);
      expect(runs).toHaveLength(1);
      expect(JSON.parse(resultText(results[0]))).toMatchObject({ refund_id: runs[0]?.refundId });
    } finally {
      await Promise.all(clients.map((connected) => connected.close()));
    }
  });

  test('concurrent raw duplicates with one header key, through both instances, run once', async () => {
    const order = orderId('multi-raw');
    // One handshake per instance: in session mode each gets a session of its own.
    const sessions = await Promise.all(proxies.map((proxy) => rawHandshake(`${proxy.url}/mcp`)));
    const answers = await Promise.all(
      [1, 2, 3, 4].map((id) =>
        postMcp(
          `${proxies[id % 2]!.url}/mcp`,
          toolCall(id, 'refund', { order_id: order, amount: 1, delay_ms: 200 }),
          { ...sessions[id % 2], 'idempotency-key': order },
        ),
      ),
    );
    const finals = answers.map(finalMessage);
    expect(finals.map((message) => message.id)).toEqual([1, 2, 3, 4]);
    for (const message of finals) expect(message.result).toEqual(finals[0]?.result);
    expect(server.runs.filter((run) => run.args.order_id === order)).toHaveLength(1);
  });
});
