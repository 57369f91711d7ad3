// The demo MCP server behind `npm run demo:mcp`: a real server built with the official SDK
// (McpServer + StreamableHTTPServerTransport in session mode, answers as SSE, the SDK's defaults)
// exposing one side-effecting tool, `refund`, that is not idempotent: every execution refunds again.
// Its first execution is slow (a cold payment provider), longer than the agent's timeout; the rest
// are fast. It counts the refunds it made, which is what the demo reports.
//
// Only src/demo imports the MCP SDK (a devDependency): the proxy itself never loads it.
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';

export interface McpRefund {
  readonly refundId: string;
  readonly orderId: string;
  readonly amount: number;
}

export interface McpRefundServer {
  /** The MCP endpoint, http://127.0.0.1:PORT/mcp. */
  readonly url: string;
  /** The base URL, for a proxy's `upstreams` entry. */
  readonly origin: string;
  /** Every refund the tool made, in order. */
  readonly refunds: readonly McpRefund[];
  /** Resolves once no `refund` execution is running (a timed-out call still finishes its refund). */
  idle(): Promise<void>;
  close(): Promise<void>;
}

export interface McpRefundServerOptions {
  /** How long the first execution of `refund` takes; later ones take `delayMs`. */
  readonly firstDelayMs: number;
  readonly delayMs?: number;
}

export async function startMcpRefundServer(
  options: McpRefundServerOptions,
): Promise<McpRefundServer> {
  const refunds: McpRefund[] = [];
  const running = new Set<Promise<unknown>>();
  const sessions = new Map<string, StreamableHTTPServerTransport>();
  let executions = 0;

  function buildServer(): McpServer {
    const server = new McpServer({ name: 'demo-refunds', version: '1.0.0' });
    server.registerTool(
      'refund',
      {
        description: 'Refunds an order through the payment provider. Not idempotent.',
        inputSchema: { order_id: z.string(), amount: z.number() },
      },
      // The SDK aborts `extra.signal` when the client cancels (it does on a timeout), but a refund
      // already sent to the payment provider cannot be called back: like most real tools, this one
      // finishes what it started. That is why a retry after a timeout refunds twice.
      async (args) => {
        executions += 1;
        const delay = executions === 1 ? options.firstDelayMs : (options.delayMs ?? 0);
        const work = new Promise((resolve) => setTimeout(resolve, delay));
        running.add(work);
        await work;
        running.delete(work);
        const refund = {
          refundId: `re_${String(refunds.length + 1).padStart(4, '0')}`,
          orderId: args.order_id,
          amount: args.amount,
        };
        refunds.push(refund);
        return { content: [{ type: 'text' as const, text: JSON.stringify(refund) }] };
      },
    );
    return server;
  }

  // The SDK's session-mode pattern: a transport per Mcp-Session-Id, created at initialize.
  async function handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const text = Buffer.concat(chunks).toString('utf8');
    const body: unknown = text ? JSON.parse(text) : undefined;
    const sessionId = req.headers['mcp-session-id'];
    const existing = typeof sessionId === 'string' ? sessions.get(sessionId) : undefined;
    if (existing) return existing.handleRequest(req, res, body);
    if (req.method === 'POST' && sessionId === undefined && isInitializeRequest(body)) {
      const transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (id) => void sessions.set(id, transport),
      });
      transport.onclose = () => {
        if (transport.sessionId) sessions.delete(transport.sessionId);
      };
      await buildServer().connect(transport);
      return transport.handleRequest(req, res, body);
    }
    res.writeHead(sessionId === undefined ? 400 : 404, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32000, message: 'Bad session' } }),
    );
  }

  const server = http.createServer((req, res) => {
    handle(req, res).catch(() => {
      if (!res.headersSent) res.writeHead(500);
      res.end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url: `${origin}/mcp`,
    origin,
    refunds,
    async idle() {
      while (running.size > 0) await Promise.all(running);
    },
    async close() {
      await Promise.all([...sessions.values()].map((transport) => transport.close()));
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
