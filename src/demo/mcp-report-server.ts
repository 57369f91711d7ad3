// The MCP demo's second server: an unmodified MCP server on the official SDK v2 (revision
// 2026-07-28, stateless) with one slow tool, `monthly_report`, that knows nothing of tasks. It
// counts the reports it built, which is what the demo's task act reports.
//
// Only src/demo imports the MCP SDK (a devDependency): the proxy itself never loads it.
import { createMcpHandler, McpServer } from '@modelcontextprotocol/server';
import { z } from 'zod';
import { serveFetchHandler } from './fetch-handler-server';

export interface McpReportServer {
  /** The base URL, for a proxy's `upstreams` entry (it answers MCP on any path). */
  readonly origin: string;
  /** The months whose report the tool built, in order. */
  readonly reports: readonly string[];
  close(): Promise<void>;
}

export async function startMcpReportServer(options: {
  /** How long one report takes to build. */
  readonly buildMs: number;
}): Promise<McpReportServer> {
  const reports: string[] = [];
  const handler = createMcpHandler(() => {
    const server = new McpServer({ name: 'demo-report-server', version: '1.0.0' });
    server.registerTool(
      'monthly_report',
      {
        description: 'Builds the month’s refund report (slow).',
        inputSchema: z.object({ month: z.string() }),
      },
      async ({ month }) => {
        await new Promise((resolve) => setTimeout(resolve, options.buildMs));
        reports.push(month);
        const text = `report ${month}: 1,284 refunds, 61,930.40 EUR`;
        return { content: [{ type: 'text', text }] };
      },
    );
    return server;
  });
  const { server, origin } = await serveFetchHandler(handler);
  return {
    origin,
    reports,
    async close() {
      await handler.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
