// Two MCP servers that read request bodies the way real ones do, for the tests of what the proxy
// refuses to read (mcp-unreadable.test.ts): each is more lenient than the proxy somewhere, so a
// body the proxy passed on unread could run a tool it never saw as a call.
// - `sdk`: the official SDK's WebStandardStreamableHTTPServerTransport, handed the raw bytes as they
//   arrived, so the SDK decodes them itself (TextDecoder: a BOM dropped, a bad byte replaced).
// - `express`: express.json() (body-parser: gzip/deflate/br inflated, the charset honoured) in
//   front of the SDK's node transport, as the SDK's own examples wire it.
// Both are stateless with JSON answers, count each `refund` execution by order_id, and record every
// request they received (for `express`, the body after body-parser inflated it).
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { WebStandardStreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js';
import { z } from 'zod';
import { startProxy, type TestProxy } from './proxy';

export type LenientKind = 'sdk' | 'express';

export interface ReceivedBody {
  readonly headers: http.IncomingHttpHeaders;
  /** The bytes the server read: as sent (`sdk`), or after body-parser's inflation (`express`). */
  readonly body: Buffer;
}

export interface LenientMcpServer {
  readonly kind: LenientKind;
  readonly origin: string;
  readonly received: ReceivedBody[];
  /** How often `refund` ran for this order. */
  executions(orderId: string): number;
  /** How often `refund` ran, for any order (a body the server decoded its own way names its own). */
  totalExecutions(): number;
  /** Resolves once a `refund` of this order has started (it may be held: `hold: true`). */
  started(orderId: string): Promise<void>;
  /** Lets every held refund finish. */
  release(): void;
  close(): Promise<void>;
}

interface Runs {
  readonly counts: Map<string, number>;
  readonly waiting: Map<string, () => void>;
  gate: Promise<void>;
  open: () => void;
}

function newRuns(): Runs {
  let open = (): void => undefined;
  const gate = new Promise<void>((resolve) => (open = resolve));
  return { counts: new Map(), waiting: new Map(), gate, open };
}

function buildServer(runs: Runs): McpServer {
  const server = new McpServer({ name: 'lenient-tool-server', version: '1.0.0' });
  server.registerTool(
    'refund',
    {
      description: 'Refunds an order (side effect).',
      inputSchema: { order_id: z.string(), amount: z.number(), hold: z.boolean().optional() },
    },
    async (args) => {
      const count = (runs.counts.get(args.order_id) ?? 0) + 1;
      runs.counts.set(args.order_id, count);
      runs.waiting.get(args.order_id)?.();
      if (args.hold) await runs.gate;
      const text = JSON.stringify({ order_id: args.order_id, run: count });
      return { content: [{ type: 'text' as const, text }] };
    },
  );
  return server;
}

function lenientServer(
  kind: LenientKind,
  server: http.Server,
  runs: Runs,
  received: ReceivedBody[],
): LenientMcpServer {
  return {
    kind,
    origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    received,
    executions: (orderId) => runs.counts.get(orderId) ?? 0,
    totalExecutions: () => [...runs.counts.values()].reduce((sum, count) => sum + count, 0),
    started: (orderId) =>
      (runs.counts.get(orderId) ?? 0) > 0
        ? Promise.resolve()
        : new Promise<void>((resolve) => runs.waiting.set(orderId, resolve)),
    release: () => runs.open(),
    async close() {
      runs.open();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

async function listen(server: http.Server): Promise<void> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
}

export async function startSdkServer(): Promise<LenientMcpServer> {
  const runs = newRuns();
  const received: ReceivedBody[] = [];
  const server = http.createServer((req, res) => {
    void (async () => {
      const chunks: Buffer[] = [];
      for await (const chunk of req) chunks.push(chunk as Buffer);
      const body = Buffer.concat(chunks);
      received.push({ headers: req.headers, body });
      const headers = new Headers();
      for (const [name, value] of Object.entries(req.headers))
        if (typeof value === 'string') headers.set(name, value);
      const mcp = buildServer(runs);
      const transport = new WebStandardStreamableHTTPServerTransport({
        sessionIdGenerator: undefined,
        enableJsonResponse: true,
      });
      await mcp.connect(transport);
      const answer = await transport.handleRequest(
        new Request(`http://127.0.0.1${req.url ?? '/'}`, {
          method: req.method ?? 'POST',
          headers,
          body: req.method === 'GET' || req.method === 'HEAD' ? undefined : body,
        }),
      );
      res.writeHead(answer.status, Object.fromEntries(answer.headers));
      res.end(Buffer.from(await answer.arrayBuffer()));
      await mcp.close();
    })().catch(() => {
      if (!res.headersSent) res.writeHead(500);
      res.end();
    });
  });
  await listen(server);
  return lenientServer('sdk', server, runs, received);
}

export async function startExpressServer(): Promise<LenientMcpServer> {
  const runs = newRuns();
  const received: ReceivedBody[] = [];
  const app = express();
  app.use(
    express.json({
      verify: (req, _res, buf) => void received.push({ headers: req.headers, body: buf }),
    }),
  );
  app.use((req, res, next) => {
    const mcp = buildServer(runs);
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: undefined,
      enableJsonResponse: true,
    });
    res.on('close', () => void mcp.close());
    mcp
      .connect(transport)
      .then(() => transport.handleRequest(req, res, req.body))
      .catch(next);
  });
  const server = http.createServer(app);
  await listen(server);
  return lenientServer('express', server, runs, received);
}

export const lenientServers: Record<LenientKind, () => Promise<LenientMcpServer>> = {
  sdk: startSdkServer,
  express: startExpressServer,
};

/** Both lenient servers behind one proxy: a protected MCP route `/<kind>/mcp` for each. */
export interface LenientStack {
  readonly servers: Record<LenientKind, LenientMcpServer>;
  readonly proxy: TestProxy;
  close(): Promise<void>;
}

/** `idempotency` lines to add to each route (e.g. `maxRequestBytes: 512kb`). */
export async function startLenientStack(
  idempotency: readonly string[] = [],
): Promise<LenientStack> {
  const servers = { sdk: await lenientServers.sdk(), express: await lenientServers.express() };
  const extra = idempotency.map((line) => `\n      ${line}`).join('');
  const route = (kind: LenientKind) => `
  - name: ${kind}
    match: { path: /${kind}/mcp }
    upstream: ${kind}
    idempotency:
      tenant: [header:authorization]${extra}
      mcp: { tools: [refund] }`;
  const proxy = await startProxy({
    yaml: `
store: { table: "\${TEST_TABLE}" }
upstreams:
  sdk: { url: ${servers.sdk.origin}, timeout: 5s }
  express: { url: ${servers.express.origin}, timeout: 5s }
routes:${route('sdk')}${route('express')}
`,
  });
  return {
    servers,
    proxy,
    async close() {
      await proxy.close();
      await servers.sdk.close();
      await servers.express.close();
    },
  };
}
