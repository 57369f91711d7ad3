// MCP routes (src/mcp/README.md) with the official SDK on both sides: an SDK client whose URL is
// the proxy, an SDK tool server behind it, in stateless and session mode, answering as SSE and as
// JSON. Every claim about "runs once" is checked against the tool server's own execution count.
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { connectMcpClient, resultText } from '../support/mcp-client';
import { orderId, startMcpProxy, toolLogLines } from '../support/mcp-proxy';
import {
  type McpToolServer,
  startMcpToolServer,
  TOOL_SERVER_MODES,
} from '../support/mcp-tool-server';
import type { TestProxy } from '../support/proxy';

const modes = TOOL_SERVER_MODES;

describe.each(modes)(
  'MCP route, SDK client and server (sessions: $sessions, json: $json)',
  (mode) => {
    let server: McpToolServer;
    let proxy: TestProxy;

    beforeAll(async () => {
      server = await startMcpToolServer(mode);
      proxy = await startMcpProxy(server.origin);
    });
    afterAll(async () => {
      await proxy?.close();
      await server?.close();
    });

    async function withClient<T>(
      run: (client: Awaited<ReturnType<typeof connectMcpClient>>['client']) => Promise<T>,
      headersFor?: (body: unknown) => Record<string, string> | undefined,
    ): Promise<T> {
      const connected = await connectMcpClient(
        `${proxy.url}/mcp`,
        headersFor ? { headersFor } : {},
      );
      try {
        return await run(connected.client);
      } finally {
        await connected.close();
      }
    }

    test('a repeated call with the same arguments runs once and returns the identical result', async () => {
      const order = orderId('repeat');
      const [first, second] = await withClient(async (client) => [
        await client.callTool({ name: 'refund', arguments: { order_id: order, amount: 10 } }),
        await client.callTool({ name: 'refund', arguments: { order_id: order, amount: 10 } }),
      ]);
      expect(second).toEqual(first);
      expect(JSON.parse(resultText(first))).toMatchObject({ order_id: order, amount: 10 });
      expect(server.runs.filter((run) => run.args.order_id === order)).toHaveLength(1);
    });

    test('a new client (a restarted agent) repeating the call gets the stored result', async () => {
      const order = orderId('restart');
      const args = { order_id: order, amount: 4 };
      const first = await withClient((client) =>
        client.callTool({ name: 'refund', arguments: args }),
      );
      const again = await withClient((client) =>
        client.callTool({ name: 'refund', arguments: args }),
      );
      expect(again).toEqual(first);
      expect(server.runs.filter((run) => run.args.order_id === order)).toHaveLength(1);
    });

    test('the same arguments with another trace_id are a repeat (ignored argument)', async () => {
      const order = orderId('trace');
      const [first, second] = await withClient(async (client) => [
        await client.callTool({
          name: 'refund',
          arguments: { order_id: order, amount: 1, trace_id: 't-1' },
        }),
        await client.callTool({
          name: 'refund',
          arguments: { order_id: order, amount: 1, trace_id: 't-2' },
        }),
      ]);
      expect(second).toEqual(first);
      expect(server.runs.filter((run) => run.args.order_id === order)).toHaveLength(1);
    });

    test('other arguments run again', async () => {
      const order = orderId('other');
      const [first, second] = await withClient(async (client) => [
        await client.callTool({ name: 'refund', arguments: { order_id: order, amount: 1 } }),
        await client.callTool({ name: 'refund', arguments: { order_id: order, amount: 2 } }),
      ]);
      expect(resultText(second)).not.toBe(resultText(first));
      expect(server.runs.filter((run) => run.args.order_id === order)).toHaveLength(2);
    });

    test('a glob matches: refund_partial is protected too', async () => {
      const order = orderId('glob');
      await withClient(async (client) => {
        await client.callTool({
          name: 'refund_partial',
          arguments: { order_id: order, amount: 1 },
        });
        await client.callTool({
          name: 'refund_partial',
          arguments: { order_id: order, amount: 1 },
        });
      });
      expect(server.runs.filter((run) => run.args.order_id === order)).toHaveLength(1);
    });

    test('an unlisted tool (get_balance) runs every time', async () => {
      const account = orderId('acct');
      const [first, second] = await withClient(async (client) => [
        await client.callTool({ name: 'get_balance', arguments: { account } }),
        await client.callTool({ name: 'get_balance', arguments: { account } }),
      ]);
      expect(resultText(second)).not.toBe(resultText(first));
      expect(server.runs.filter((run) => run.args.account === account)).toHaveLength(2);
    });

    test('an isError: true result is stored: the tool ran, a repeat replays it', async () => {
      const order = orderId('fail');
      const [first, second] = await withClient(async (client) => [
        await client.callTool({ name: 'fail_refund', arguments: { order_id: order } }),
        await client.callTool({ name: 'fail_refund', arguments: { order_id: order } }),
      ]);
      expect(first.isError).toBe(true);
      expect(second).toEqual(first);
      expect(server.runs.filter((run) => run.args.order_id === order)).toHaveLength(1);
    });

    test('a header key reused with other arguments gets the 422 JSON-RPC error', async () => {
      const order = orderId('reuse');
      const key = `key-${order}`;
      const headersFor = (body: unknown) =>
        (body as { method?: string }).method === 'tools/call'
          ? { 'Idempotency-Key': key }
          : undefined;
      await withClient(async (client) => {
        await client.callTool({ name: 'refund', arguments: { order_id: order, amount: 1 } });
        const error = await client
          .callTool({ name: 'refund', arguments: { order_id: order, amount: 99 } })
          .then(
            () => undefined,
            (caught: unknown) => caught,
          );
        expect(error).toBeInstanceOf(McpError);
        expect((error as McpError).code).toBe(422);
        expect((error as McpError).data).toMatchObject({ type: 'idempotency_key_conflict' });
      }, headersFor);
      expect(server.runs.filter((run) => run.args.order_id === order)).toHaveLength(1);
    });

    test('initialize, tools/list and notifications reach the server with session id and protocol version as sent', async () => {
      const connected = await connectMcpClient(`${proxy.url}/mcp`);
      const before = server.received.length;
      await connected.client.listTools();
      const sessionId = connected.transport.sessionId;
      const version = connected.transport.protocolVersion;
      await connected.close();
      const list = server.received
        .slice(before)
        .find(
          (request) => (request.json as { method?: string } | undefined)?.method === 'tools/list',
        );
      expect(list).toBeDefined();
      expect(list?.headers['mcp-protocol-version']).toBe(version);
      expect(list?.headers['mcp-session-id']).toBe(sessionId);
      expect(Boolean(sessionId)).toBe(mode.sessions);
      if (mode.sessions) {
        const deleted = server.received
          .slice(before)
          .find((request) => request.method === 'DELETE');
        expect(deleted?.headers['mcp-session-id']).toBe(sessionId);
      }
      const methods = server.received.map(
        (request) => (request.json as { method?: string } | undefined)?.method,
      );
      expect(methods).toEqual(expect.arrayContaining(['initialize', 'notifications/initialized']));
    });

    test('request log lines carry the tool name', async () => {
      proxy.logs.length = 0;
      const order = orderId('log');
      await withClient((client) =>
        client.callTool({ name: 'refund', arguments: { order_id: order, amount: 1 } }),
      );
      const lines = await toolLogLines(proxy, 1);
      expect(lines.map((line) => line.tool)).toContain('refund');
    });

    if (!mode.json) {
      test('progress notifications reach the first caller while the call runs; a replay has none', async () => {
        const order = orderId('progress');
        const args = { order_id: order, amount: 3, delay_ms: 300 };
        const firstProgress: number[] = [];
        const replayProgress: number[] = [];
        await withClient(async (client) => {
          const first = await client.callTool({ name: 'refund', arguments: args }, undefined, {
            onprogress: (event) => firstProgress.push(event.progress),
          });
          const replay = await client.callTool({ name: 'refund', arguments: args }, undefined, {
            onprogress: (event) => replayProgress.push(event.progress),
          });
          expect(replay).toEqual(first);
        });
        expect(firstProgress).toEqual([1, 2, 3]);
        expect(replayProgress).toEqual([]);
        expect(server.runs.filter((run) => run.args.order_id === order)).toHaveLength(1);
      });
    }

    // On timeout the SDK client sends notifications/cancelled, which a session-mode SDK server
    // obeys by never writing the answer: the proxy takes that cancel itself while the call runs
    // (mcp/in-flight-calls.ts), so the result is stored in every mode.
    {
      test('a call whose client times out before the tool finishes, retried, runs once and the retry gets the result', async () => {
        const order = orderId('timeout');
        const args = { order_id: order, amount: 7, delay_ms: 800 };
        const retried = await withClient(async (client) => {
          await expect(
            client.callTool({ name: 'refund', arguments: args }, undefined, { timeout: 150 }),
          ).rejects.toThrow(/timed out/i);
          return client.callTool({ name: 'refund', arguments: args });
        });
        const runs = server.runs.filter((run) => run.args.order_id === order);
        expect(runs).toHaveLength(1);
        if (mode.sessions)
          expect(proxy.logs.some((line) => line.outcome === 'cancel_held')).toBe(true);
        expect(JSON.parse(resultText(retried))).toMatchObject({
          refund_id: runs[0]?.refundId,
          order_id: order,
        });
      });
    }
  },
);
