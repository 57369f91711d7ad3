// MCP routes carry the tool name into metrics and logs (src/mcp/README.md): the admin listener's
// /metrics has `idempotency_proxy_mcp_tool_calls_total{route,tool,outcome}` counting exactly the
// protected calls made, by outcome; each protected call's request log line has `tool`; a tool the
// route does not protect (get_balance) passes through and leaves no tool counter and no `tool` in
// its log line.
import { eventually, until } from '../support/eventually';
import { connectMcpClient, postMcp, resultText, toolCall } from '../support/mcp-client';
import { orderId, startMcpProxy } from '../support/mcp-proxy';
import { type McpToolServer, startMcpToolServer } from '../support/mcp-tool-server';
import { send } from '../support/http';
import type { TestProxy } from '../support/proxy';

let server: McpToolServer;
let proxy: TestProxy;

beforeAll(async () => {
  server = await startMcpToolServer({ sessions: false, json: false });
  proxy = await startMcpProxy(server.origin);
});
afterAll(async () => {
  await proxy?.close();
  await server?.close();
});

const TOOL_CALLS = 'idempotency_proxy_mcp_tool_calls_total';

/** Every sample of the tool counter, as `route tool outcome` → value. */
async function toolCounters(): Promise<Map<string, number>> {
  const text = (await send(`${proxy.adminUrl}/metrics`, { method: 'GET' })).text();
  const samples = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${TOOL_CALLS}{`)) continue;
    const labels = Object.fromEntries(
      [...line.matchAll(/(\w+)="([^"]*)"/g)].map((match) => [match[1], match[2]]),
    );
    samples.set(`${labels.route} ${labels.tool} ${labels.outcome}`, Number(line.split(' ').at(-1)));
  }
  return samples;
}

/** Polls /metrics until the counters equal `expected` (log lines, hence metrics, follow the answer). */
async function untilCounters(expected: Record<string, number>, timeoutMs = 3_000): Promise<void> {
  await eventually(async () => expect(Object.fromEntries(await toolCounters())).toEqual(expected), {
    timeoutMs,
  });
}

async function untilLogLines(
  match: (line: Record<string, unknown>) => boolean,
  count: number,
): Promise<Record<string, unknown>[]> {
  const lines = () => proxy.logs.filter((line) => line.msg === 'request' && match(line));
  // After 3 s, the lines there are: the caller's assertion reports what is missing.
  await until(() => lines().length >= count, `${count} log lines`, { timeoutMs: 3_000 }).catch(
    () => undefined,
  );
  return lines();
}

const HEADERS = { 'mcp-protocol-version': '2025-06-18' };

test('tool counters and log lines match the calls made, by tool and outcome; unprotected tools leave none', async () => {
  await untilCounters({}); // nothing yet: initialize and tools/list are not tool calls
  const order = orderId('observe');
  const connected = await connectMcpClient(`${proxy.url}/mcp`);
  try {
    const { client } = connected;
    const args = { order_id: order, amount: 4 };
    const first = await client.callTool({ name: 'refund', arguments: args });
    const second = await client.callTool({ name: 'refund', arguments: args });
    const third = await client.callTool({ name: 'refund', arguments: args });
    expect(resultText(second)).toBe(resultText(first));
    expect(resultText(third)).toBe(resultText(first));
    await client.callTool({ name: 'refund_partial', arguments: args });
    for (let i = 0; i < 3; i++)
      await client.callTool({ name: 'get_balance', arguments: { account: 'acc-1' } });
  } finally {
    await connected.close();
  }
  // A header key reused with other arguments: a mismatch, counted under its tool too.
  const key = { ...HEADERS, 'idempotency-key': `observe-${order}` };
  await postMcp(`${proxy.url}/mcp`, toolCall(1, 'refund', { order_id: order, amount: 1 }), key);
  const mismatch = await postMcp(
    `${proxy.url}/mcp`,
    toolCall(2, 'refund', { order_id: order, amount: 2 }),
    key,
  );
  expect(mismatch.messages[0]).toMatchObject({ error: { code: 422 } });

  expect(server.executions('refund')).toBe(2);
  expect(server.executions('refund_partial')).toBe(1);
  expect(server.executions('get_balance')).toBe(3);
  await untilCounters({
    'tools refund executed': 2,
    'tools refund replayed': 2,
    'tools refund mismatch': 1,
    'tools refund_partial executed': 1,
  });

  const toolLines = await untilLogLines((line) => line.tool !== undefined, 6);
  expect(toolLines.map((line) => [line.tool, line.outcome])).toEqual([
    ['refund', 'executed'],
    ['refund', 'replayed'],
    ['refund', 'replayed'],
    ['refund_partial', 'executed'],
    ['refund', 'executed'],
    ['refund', 'mismatch'],
  ]);
  for (const line of toolLines) expect(line).toMatchObject({ route: 'tools', path: '/mcp' });
  expect(toolLines[0]).toMatchObject({ keyDerived: true, status: 200 });
  expect(toolLines[1]!.key).toBe(toolLines[0]!.key);
  expect(toolLines[4]).toMatchObject({ key: `observe-${order}` });
  expect(toolLines[4]!.keyDerived).toBeUndefined();

  // The get_balance calls (and initialize, tools/list) are pass-through lines without a tool.
  const passed = proxy.logs.filter(
    (line) => line.msg === 'request' && line.outcome === 'passthrough',
  );
  expect(passed.length).toBeGreaterThanOrEqual(3 + 2);
  for (const line of passed) expect(line.tool).toBeUndefined();
  const text = (await send(`${proxy.adminUrl}/metrics`, { method: 'GET' })).text();
  expect(text).not.toContain('get_balance');
  expect(text).not.toContain(order); // arguments and keys never become labels
});
