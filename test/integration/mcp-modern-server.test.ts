// The SDK v2 tool server and client (protocol revision 2026-07-28) with no proxy in between: the
// client runs stateless, opens with `server/discover`, and sends `Mcp-Method` / `Mcp-Name` and
// `MCP-Protocol-Version: 2026-07-28` on every POST. The MCP route tests rely on these shapes.
import { resultText } from '../support/mcp-client';
import {
  connectModernClient,
  MODERN_REVISION,
  type ModernToolServer,
  startModernToolServer,
} from '../support/mcp-modern-server';

let server: ModernToolServer;

beforeEach(async () => {
  server = await startModernToolServer();
});
afterEach(async () => {
  await server.close();
});

test('a 2026-07-28 client calls a tool statelessly, with Mcp-Method headers and no session', async () => {
  const client = await connectModernClient(server.url);
  try {
    const first = await client.callTool({
      name: 'refund',
      arguments: { order_id: 'o-1', amount: 3 },
    });
    const second = await client.callTool({
      name: 'refund',
      arguments: { order_id: 'o-1', amount: 3 },
    });
    expect(resultText(first)).not.toBe(resultText(second));
    expect(server.executions()).toBe(2);
  } finally {
    await client.close();
  }
  const methods = server.received.map(
    (request) => (request.json as { method?: string } | undefined)?.method,
  );
  expect(methods).not.toContain('initialize');
  expect(methods).toContain('server/discover');
  const calls = server.received.filter((request) => request.headers['mcp-method'] === 'tools/call');
  expect(calls).toHaveLength(2);
  for (const call of calls) {
    expect(call.headers).toMatchObject({
      'mcp-protocol-version': MODERN_REVISION,
      'mcp-name': 'refund',
    });
    expect(call.headers['mcp-session-id']).toBeUndefined();
  }
});
