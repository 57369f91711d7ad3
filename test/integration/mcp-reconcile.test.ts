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
import { PROBE_REVISIONS } from '../../src/mcp/reconcile-probe';

interface Ledger {
  readonly refunds: { refund_id: string; order_id: string; amount: number }[];
  lookups: number;
  /** Sessions the server holds open now (the probe's must all be ended). */
  openSessions(): number;
  /** The protocolVersion each initialize asked for, and each DELETE's session id. */
  readonly initialized: unknown[];
  readonly deleted: string[];
}

async function startLedgerServer(
  ledger: Omit<Ledger, 'openSessions'>,
): Promise<{ origin: string; openSessions(): number; close(): Promise<void> }> {
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
      if (req.method === 'DELETE' && typeof id === 'string') ledger.deleted.push(id);
      const existing = typeof id === 'string' ? sessions.get(id) : undefined;
      if (existing) return existing.handleRequest(req, res, json);
      if (isInitializeRequest(json)) {
        ledger.initialized.push(json.params.protocolVersion);
        const transport = new StreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          onsessioninitialized: (sid) => void sessions.set(sid, transport),
          onsessionclosed: (sid) => void sessions.delete(sid),
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
    openSessions: () => sessions.size,
    close: async () => {
      for (const transport of sessions.values()) await transport.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

const ledger: Ledger = {
  refunds: [],
  lookups: 0,
  initialized: [],
  deleted: [],
  openSessions: () => upstream.openSessions(),
};
let upstream: { origin: string; openSessions(): number; close(): Promise<void> };
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
    const error = first.json.error as { data: { type: string; retryAfter: number } };
    expect(error.data.type).toBe('idempotency_outcome_unknown');
    // Retry-After in the body too, where a JSON-RPC client reads it (as a 409 in flight has it).
    expect(error.data.retryAfter).toBe(Number(first.headers['retry-after']));
    expect(error.data.retryAfter).toBeGreaterThanOrEqual(1);
    let id = 2;
    const answer = await until(
      async () => {
        const retry = await callRefund('mcp-k1', id++, {
          order_id: 'ord_9',
          amount: 5,
          answer_late_ms: 3_000,
        });
        if (retry.headers['idempotency-outcome'] !== 'unknown') return retry;
        const data = (retry.json.error as { data: { retryAfter?: number } }).data;
        expect(data.retryAfter).toBe(Number(retry.headers['retry-after']));
        return undefined;
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

  it('every probe negotiates the newest revision and ends the session it opened: none is left open', async () => {
    const probesBefore = ledger.initialized.length;
    const orders = ['ord_20', 'ord_21', 'ord_22'];
    await Promise.all(
      orders.map((order, n) =>
        callRefund(`mcp-s${n}`, 1, { order_id: order, amount: 3, answer_late_ms: 3_000 }),
      ),
    );
    // Two found, one not found: the ledger forgets ord_22, so its probe finds nothing.
    ledger.refunds.splice(
      ledger.refunds.findIndex((r) => r.order_id === 'ord_22'),
      1,
    );
    let id = 2;
    for (const [n, order] of orders.entries())
      await until(
        async () => {
          const retry = await callRefund(`mcp-s${n}`, id++, { order_id: order, amount: 3 });
          return retry.headers['idempotency-outcome'] === 'unknown' ? undefined : retry;
        },
        `mcp-s${n} to be resolved`,
        { timeoutMs: 15_000, intervalMs: 250 },
      );
    const probes = ledger.initialized.slice(probesBefore);
    expect(probes).toHaveLength(orders.length);
    expect(probes.every((version) => version === PROBE_REVISIONS[0])).toBe(true);
    // Each probe's DELETE follows its answer: none is left open once they have arrived.
    await until(() => ledger.openSessions() === 0, 'every probe session to be ended');
    expect(ledger.deleted.length).toBeGreaterThanOrEqual(orders.length);
    expect(ledger.refunds.filter((r) => orders.includes(r.order_id))).toHaveLength(3);
    recordFigures(__filename, 'mcp probe sessions', {
      probes: probes.length,
      sessionsLeftOpen: ledger.openSessions(),
    });
  });
});
