// Unknown outcomes on an MCP route resolved with a tool call (docs/reconcile.md), against a tool
// server built with the official MCP SDK answering with event streams: the agent's calls are served
// statelessly, the probe initializes a session, then calls the lookup tool. The refund tool runs, then answers later than
// the proxy waits; the retry gets the real result, and the refund ran once.
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { postRawMcp, type RawAnswer } from '../support/mcp-raw-post';
import { recordRequest } from '../support/mcp-tool-server';
import { startProxy, type TestProxy } from '../support/proxy';
import { until } from '../support/eventually';
import { recordFigures } from '../support/run-report';

interface Ledger {
  readonly refunds: { refund_id: string; order_id: string; amount: number }[];
  lookups: number;
}

async function startLedgerServer(
  ledger: Ledger,
): Promise<{ origin: string; close(): Promise<void> }> {
  const sessions = new Map<string, StreamableHTTPServerTransport>();
  const build = (): McpServer => {
    const server = new McpServer({ name: 'ledger', version: '1.0.0' });
    server.registerTool(
      'refund',
      {
        description: 'Refunds an order, then answers after answer_late_ms.',
        inputSchema: {
          order_id: z.string(),
          amount: z.number(),
          answer_late_ms: z.number().optional(),
        },
      },
      async (args) => {
        const refund = {
          refund_id: `re_${ledger.refunds.length + 1}`,
          order_id: args.order_id,
          amount: args.amount,
        };
        ledger.refunds.push(refund);
        if (args.answer_late_ms)
          await new Promise((r) => setTimeout(r, args.answer_late_ms).unref());
        return {
          content: [{ type: 'text', text: JSON.stringify(refund) }],
          structuredContent: { refund },
        };
      },
    );
    server.registerTool(
      'find_refund',
      {
        description: 'Looks a refund up by order.',
        inputSchema: { order_id: z.string() },
        outputSchema: {
          refund: z
            .object({ refund_id: z.string(), order_id: z.string(), amount: z.number() })
            .optional(),
        },
        annotations: { readOnlyHint: true },
      },
      (args) => {
        ledger.lookups++;
        const refund = ledger.refunds.find((r) => r.order_id === args.order_id);
        return {
          content: [{ type: 'text', text: JSON.stringify(refund ?? null) }],
          structuredContent: refund ? { refund } : {},
        };
      },
    );
    return server;
  };
  const server = http.createServer((req, res) => {
    void (async () => {
      const { json } = await recordRequest(req);
      const id = req.headers['mcp-session-id'];
      const existing = typeof id === 'string' ? sessions.get(id) : undefined;
      if (existing) return existing.handleRequest(req, res, json);
      if (isInitializeRequest(json)) {
        const transport = new StreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          onsessioninitialized: (sid) => void sessions.set(sid, transport),
        });
        await build().connect(transport);
        return transport.handleRequest(req, res, json);
      }
      // A call without a session (the agent's, through the proxy): served statelessly, one JSON answer.
      const stateless = new StreamableHTTPServerTransport({
        sessionIdGenerator: undefined,
        enableJsonResponse: true,
      });
      const server = build();
      res.on('close', () => void server.close());
      await server.connect(stateless);
      return stateless.handleRequest(req, res, json);
    })();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: async () => {
      for (const transport of sessions.values()) await transport.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

const ledger: Ledger = { refunds: [], lookups: 0 };
let upstream: { origin: string; close(): Promise<void> };
let proxy: TestProxy;

beforeAll(async () => {
  upstream = await startLedgerServer(ledger);
  proxy = await startProxy({
    yaml: `
store: { table: "\${TEST_TABLE}" }
upstreams:
  ledger: { url: ${upstream.origin}, timeout: 300ms }
routes:
  - name: tools
    match: { path: /mcp }
    upstream: ledger
    idempotency:
      mcp: { tools: [refund], ignore: [arguments.answer_late_ms] }
      reconcile:
        tool: { name: find_refund, arguments: { order_id: "{arguments:/order_id}" } }
        found: { exists: /refund }
        answer: { body: /structuredContent/refund }
        after: 1s
        every: 0
`,
  });
});

afterAll(async () => {
  await proxy?.close();
  await upstream?.close();
});

function callRefund(key: string, id: number, args: Record<string, unknown>): Promise<RawAnswer> {
  const body = {
    jsonrpc: '2.0',
    id,
    method: 'tools/call',
    params: { name: 'refund', arguments: args },
  };
  return postRawMcp(`${proxy.url}/mcp`, Buffer.from(JSON.stringify(body)), {
    'idempotency-key': key,
  });
}

describe('an MCP route with reconcile.tool', () => {
  it('found: the retry after an unknown outcome gets the refund the lookup tool reports, under its own id', async () => {
    const first = await callRefund('mcp-k1', 1, {
      order_id: 'ord_9',
      amount: 5,
      answer_late_ms: 3_000,
    });
    expect(first.headers['idempotency-outcome']).toBe('unknown');
    expect((first.json.error as { data: { type: string } }).data.type).toBe(
      'idempotency_outcome_unknown',
    );
    let id = 2;
    const answer = await until(
      async () => {
        const retry = await callRefund('mcp-k1', id++, {
          order_id: 'ord_9',
          amount: 5,
          answer_late_ms: 3_000,
        });
        return retry.headers['idempotency-outcome'] === 'unknown' ? undefined : retry;
      },
      'the call to be reconciled',
      { timeoutMs: 15_000, intervalMs: 250 },
    );
    expect(answer.headers['idempotency-outcome']).toBe('reconciled');
    expect(answer.json).toEqual({ jsonrpc: '2.0', id: id - 1, result: ledger.refunds[0] });
    expect(ledger.refunds).toHaveLength(1);
    expect(ledger.lookups).toBe(1);
    recordFigures(__filename, 'mcp found', {
      executions: ledger.refunds.length,
      probes: ledger.lookups,
      agentGot: 'reconciled result',
    });
  });

  it('not found: a call that never ran is forwarded once, with the same key, and its result stored', async () => {
    const first = await callRefund('mcp-k2', 1, {
      order_id: 'ord_10',
      amount: 7,
      answer_late_ms: 3_000,
    });
    expect(first.headers['idempotency-outcome']).toBe('unknown');
    // As if the call never ran upstream: the ledger loses it, so the lookup finds nothing.
    ledger.refunds.splice(
      ledger.refunds.findIndex((r) => r.order_id === 'ord_10'),
      1,
    );
    let id = 2;
    const answer = await until(
      async () => {
        const retry = await callRefund('mcp-k2', id++, { order_id: 'ord_10', amount: 7 });
        return retry.headers['idempotency-outcome'] === 'unknown' ? undefined : retry;
      },
      'the call to be forwarded again',
      { timeoutMs: 15_000, intervalMs: 250 },
    );
    const ran = ledger.refunds.filter((r) => r.order_id === 'ord_10');
    expect(ran).toHaveLength(1);
    expect(answer.json.result).toMatchObject({ structuredContent: { refund: ran[0] } });
    const again = await callRefund('mcp-k2', 99, { order_id: 'ord_10', amount: 7 });
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.json).toEqual({ ...answer.json, id: 99 });
    expect(ledger.refunds.filter((r) => r.order_id === 'ord_10')).toHaveLength(1);
    recordFigures(__filename, 'mcp not found', {
      executions: ran.length,
      agentGot: 'the forwarded call’s result',
    });
  });
});
