// A real MCP tool server built with the official SDK (@modelcontextprotocol/sdk 1.x) on node:http
// at port 0, for the MCP route tests (src/mcp/README.md). Stateless or session mode, SSE or JSON
// answers. It counts every tool execution and records every HTTP request it received, so tests
// assert what the upstream ran as well as what the client saw.
import { randomBytes, randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { eventually } from './eventually';

export type ToolName = 'refund' | 'refund_partial' | 'get_balance' | 'fail_refund';

export interface ToolServerOptions {
  /** Session mode (Mcp-Session-Id issued at initialize) instead of stateless. */
  readonly sessions: boolean;
  /** Answer POSTs with one application/json body (`enableJsonResponse`) instead of SSE. */
  readonly json: boolean;
}

/** The four shapes the MCP tests run against: stateless/session × SSE/JSON. */
export const TOOL_SERVER_MODES = [
  { sessions: false, json: false },
  { sessions: false, json: true },
  { sessions: true, json: false },
  { sessions: true, json: true },
] as const satisfies readonly ToolServerOptions[];

export interface RecordedRequest {
  readonly method: string;
  readonly url: string;
  readonly headers: http.IncomingHttpHeaders;
  /** The raw body text ('' for GET/DELETE). */
  readonly body: string;
  /** The parsed JSON-RPC body, or undefined when not JSON. */
  readonly json: unknown;
}

export interface ToolExecution {
  readonly tool: ToolName;
  readonly args: Record<string, unknown>;
  /** Unique per execution: two equal results mean one execution answered twice. */
  readonly refundId: string;
}

export interface McpToolServer {
  /** The MCP endpoint, e.g. http://127.0.0.1:PORT/mcp. */
  readonly url: string;
  /** The base URL (no path), for a proxy's `upstreams` entry. */
  readonly origin: string;
  readonly received: RecordedRequest[];
  readonly runs: ToolExecution[];
  executions(tool?: ToolName): number;
  /** The tools/call requests received (JSON-RPC bodies). */
  toolCalls(tool?: ToolName): Record<string, unknown>[];
  /** Resolves when `tool` has started `count` executions (polls with a deadline). */
  untilExecutions(count: number, tool?: ToolName, timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
}

const refundArgs = {
  order_id: z.string(),
  amount: z.number(),
  delay_ms: z.number().optional(),
  trace_id: z.string().optional(),
  /** Destroy the HTTP socket after the refund ran, before its response is written. */
  drop_stream: z.boolean().optional(),
};

/** Reads the whole request body and records it with the request line and headers. */
export async function recordRequest(req: http.IncomingMessage): Promise<RecordedRequest> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return recordedFrom(req, Buffer.concat(chunks));
}

/** A request as recorded, from its head and the body already read. */
export function recordedFrom(req: http.IncomingMessage, bytes: Buffer): RecordedRequest {
  const body = bytes.toString('utf8');
  let json: unknown;
  try {
    json = body ? JSON.parse(body) : undefined;
  } catch {
    json = undefined;
  }
  return { method: req.method ?? '', url: req.url ?? '', headers: req.headers, body, json };
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

export async function startMcpToolServer(options: ToolServerOptions): Promise<McpToolServer> {
  const received: RecordedRequest[] = [];
  const runs: ToolExecution[] = [];
  /** Responses to destroy, by order_id, for calls that asked for `drop_stream`. */
  const toDrop = new Map<string, http.ServerResponse>();
  const sessions = new Map<string, StreamableHTTPServerTransport>();

  function buildServer(): McpServer {
    const server = new McpServer({ name: 'tool-server', version: '1.0.0' });
    const refund =
      (tool: ToolName) =>
      async (
        args: { order_id: string; amount: number; delay_ms?: number; drop_stream?: boolean },
        extra: {
          _meta?: { progressToken?: string | number };
          sendNotification: (n: {
            method: 'notifications/progress';
            params: { progressToken: string | number; progress: number; total: number };
          }) => Promise<void>;
        },
      ) => {
        const refundId = `re_${runs.length + 1}_${randomBytes(4).toString('hex')}`;
        runs.push({ tool, args: { ...args }, refundId });
        const token = extra._meta?.progressToken;
        const steps = 3;
        for (let step = 1; step <= steps; step++) {
          if (args.delay_ms) await sleep(args.delay_ms / steps);
          if (token !== undefined) {
            await extra.sendNotification({
              method: 'notifications/progress',
              params: { progressToken: token, progress: step, total: steps },
            });
          }
        }
        if (args.drop_stream) toDrop.get(args.order_id)?.socket?.destroy();
        const text = JSON.stringify({
          refund_id: refundId,
          order_id: args.order_id,
          amount: args.amount,
        });
        return { content: [{ type: 'text' as const, text }] };
      };
    server.registerTool(
      'refund',
      { description: 'Refunds an order (side effect).', inputSchema: refundArgs },
      refund('refund'),
    );
    server.registerTool(
      'refund_partial',
      { description: 'Refunds part of an order (side effect).', inputSchema: refundArgs },
      refund('refund_partial'),
    );
    server.registerTool(
      'get_balance',
      {
        description: 'Reads a balance (no side effect).',
        inputSchema: { account: z.string() },
        annotations: { readOnlyHint: true },
      },
      (args) => {
        const refundId = `bal_${runs.length + 1}_${randomBytes(4).toString('hex')}`;
        runs.push({ tool: 'get_balance', args: { ...args }, refundId });
        return {
          content: [
            {
              type: 'text',
              text: JSON.stringify({ account: args.account, balance: 100, read: refundId }),
            },
          ],
        };
      },
    );
    server.registerTool(
      'fail_refund',
      { description: 'Runs, then reports a tool error.', inputSchema: { order_id: z.string() } },
      (args) => {
        const refundId = `fail_${runs.length + 1}_${randomBytes(4).toString('hex')}`;
        runs.push({ tool: 'fail_refund', args: { ...args }, refundId });
        return {
          isError: true,
          content: [{ type: 'text', text: `refund declined (${refundId})` }],
        };
      },
    );
    return server;
  }

  async function handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const request = await recordRequest(req);
    received.push(request);
    const json = request.json;
    const call = json as {
      method?: string;
      params?: { arguments?: { order_id?: unknown; drop_stream?: unknown } };
    };
    if (call?.method === 'tools/call' && call.params?.arguments?.drop_stream === true) {
      toDrop.set(String(call.params.arguments.order_id), res);
    }

    const transportOptions = { enableJsonResponse: options.json };
    if (!options.sessions) {
      const server = buildServer();
      const transport = new StreamableHTTPServerTransport({
        ...transportOptions,
        sessionIdGenerator: undefined,
      });
      res.on('close', () => {
        void transport.close();
        void server.close();
      });
      await server.connect(transport);
      await transport.handleRequest(req, res, json);
      return;
    }
    const sessionId = req.headers['mcp-session-id'];
    const existing = typeof sessionId === 'string' ? sessions.get(sessionId) : undefined;
    if (existing) {
      await existing.handleRequest(req, res, json);
      return;
    }
    if (req.method === 'POST' && sessionId === undefined && isInitializeRequest(json)) {
      const transport = new StreamableHTTPServerTransport({
        ...transportOptions,
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (id) => void sessions.set(id, transport),
      });
      transport.onclose = () => {
        if (transport.sessionId) sessions.delete(transport.sessionId);
      };
      await buildServer().connect(transport);
      await transport.handleRequest(req, res, json);
      return;
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

  const count = (tool?: ToolName) =>
    runs.filter((run) => tool === undefined || run.tool === tool).length;
  return {
    url: `${origin}/mcp`,
    origin,
    received,
    runs,
    executions: count,
    toolCalls: (tool) =>
      received
        .map((request) => request.json as Record<string, unknown> | undefined)
        .filter(
          (body): body is Record<string, unknown> =>
            body?.method === 'tools/call' &&
            (tool === undefined || (body.params as { name?: unknown } | undefined)?.name === tool),
        ),
    async untilExecutions(wanted, tool, timeoutMs = 5_000) {
      await eventually(
        () => {
          if (count(tool) < wanted)
            throw new Error(`${tool ?? 'tools'} ran ${count(tool)} times, not ${wanted}`);
        },
        { timeoutMs, intervalMs: 10 },
      );
    },
    async close() {
      await Promise.all([...sessions.values()].map((transport) => transport.close()));
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
