// A tool server and client on the official SDK v2 (@modelcontextprotocol/server and /client), which
// speak protocol revision 2026-07-28: stateless, no initialize (the client probes with
// `server/discover`), and `Mcp-Method` / `Mcp-Name` headers on every POST. Counts refund executions
// and records requests like mcp-tool-server.ts does for the 1.x SDK.
import { randomBytes } from 'node:crypto';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { createMcpHandler, McpServer } from '@modelcontextprotocol/server';
import { z } from 'zod';
import {
  type FetchHandlerServer,
  serveFetchHandler as serveDemoFetchHandler,
} from '../../src/demo/fetch-handler-server';
import { type RecordedRequest, recordedFrom } from './mcp-tool-server';

export const MODERN_REVISION = '2026-07-28';

export interface ModernToolServer {
  readonly url: string;
  readonly origin: string;
  readonly received: RecordedRequest[];
  executions(): number;
  close(): Promise<void>;
}

export async function startModernToolServer(): Promise<ModernToolServer> {
  const received: RecordedRequest[] = [];
  let runs = 0;
  const handler = createMcpHandler(() => {
    const server = new McpServer({ name: 'modern-tool-server', version: '1.0.0' });
    server.registerTool(
      'refund',
      {
        description: 'Refunds an order (side effect).',
        inputSchema: z.object({
          order_id: z.string(),
          amount: z.number(),
          trace_id: z.string().optional(),
        }),
      },
      (args) => {
        runs += 1;
        const refundId = `re_${runs}_${randomBytes(4).toString('hex')}`;
        const text = JSON.stringify({
          refund_id: refundId,
          order_id: args.order_id,
          amount: args.amount,
        });
        return { content: [{ type: 'text', text }] };
      },
    );
    return server;
  });

  const { server, origin } = await serveFetchHandler(handler, received);
  return {
    url: `${origin}/mcp`,
    origin,
    received,
    executions: () => runs,
    async close() {
      await handler.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/**
 * Serves an SDK v2 fetch handler on node:http at port 0 (src/demo/fetch-handler-server.ts),
 * recording every request it receives; the caller closes the handler and the server.
 */
export function serveFetchHandler(
  handler: { fetch(request: Request): Promise<Response> },
  received: RecordedRequest[],
): Promise<FetchHandlerServer> {
  return serveDemoFetchHandler(handler, (req, body) => received.push(recordedFrom(req, body)));
}

/** An SDK v2 client pinned to 2026-07-28 (no fallback to the 2025 handshake). */
export async function connectModernClient(url: string): Promise<Client> {
  const client = new Client(
    { name: 'mcp-route-tests', version: '1.0.0' },
    { versionNegotiation: { mode: { pin: MODERN_REVISION } } },
  );
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  return client;
}
