// An SDK v2 tool server (protocol revision 2026-07-28) whose `refund` takes two rounds: the first
// answers `input_required` with an embedded elicitation ("confirm") and a `requestState`; the
// continuation, carrying the accepted confirmation in `inputResponses` and the echoed state,
// refunds. A declined confirmation gets a tool error (`isError: true`) and refunds nothing. Counts
// first rounds and refunds per order, for the multi round-trip tests (src/mcp/README.md).
import {
  acceptedContent,
  createMcpHandler,
  inputRequired,
  inputResponse,
  McpServer,
} from '@modelcontextprotocol/server';
import { z } from 'zod';
import { postMcp, type RawMcpResponse } from './mcp-client';
import { MODERN_REVISION, serveFetchHandler } from './mcp-modern-server';
import type { RecordedRequest } from './mcp-tool-server';

export interface RoundsServer {
  readonly origin: string;
  readonly received: RecordedRequest[];
  /** First rounds answered with input_required, by order. */
  asked(order: string): number;
  /** Refunds made (the side effect), by order. */
  refunds(order: string): number;
  close(): Promise<void>;
}

const CONFIRM = z.object({ confirm: z.boolean() });

/** An SDK v2 server whose `refund` asks for a confirmation first and refunds on the continuation. */
export async function startRoundsServer(): Promise<RoundsServer> {
  const received: RecordedRequest[] = [];
  const asked = new Map<string, number>();
  const refunds = new Map<string, number>();
  const bump = (counts: Map<string, number>, order: string) =>
    counts.set(order, (counts.get(order) ?? 0) + 1).get(order)!;
  const handler = createMcpHandler(() => {
    const server = new McpServer({ name: 'rounds-server', version: '1.0.0' });
    server.registerTool(
      'refund',
      {
        description: 'Refunds an order once the user confirms (side effect).',
        inputSchema: z.object({ order_id: z.string(), amount: z.number() }),
      },
      (args, ctx) => {
        const responses = ctx.mcpReq.inputResponses;
        const state = ctx.mcpReq.requestState();
        const answer = inputResponse(responses, 'confirm');
        if (answer.kind === 'elicit' && answer.action !== 'accept')
          return {
            isError: true,
            content: [{ type: 'text', text: 'refund declined by the user' }],
          };
        if (
          acceptedContent(responses, 'confirm', CONFIRM)?.confirm !== true ||
          state !== `confirm:${args.order_id}`
        ) {
          bump(asked, args.order_id);
          return inputRequired({
            inputRequests: {
              confirm: inputRequired.elicit({
                message: `Refund ${args.amount} on ${args.order_id}?`,
                requestedSchema: CONFIRM,
              }),
            },
            requestState: `confirm:${args.order_id}`,
          });
        }
        const run = bump(refunds, args.order_id);
        const text = JSON.stringify({
          refund_id: `re_${args.order_id}_${run}`,
          amount: args.amount,
        });
        return { content: [{ type: 'text', text }] };
      },
    );
    return server;
  });
  const { server, origin } = await serveFetchHandler(handler, received);
  return {
    origin,
    received,
    asked: (order) => asked.get(order) ?? 0,
    refunds: (order) => refunds.get(order) ?? 0,
    async close() {
      await handler.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

const META = {
  'io.modelcontextprotocol/protocolVersion': MODERN_REVISION,
  'io.modelcontextprotocol/clientInfo': { name: 'raw-rounds', version: '1.0.0' },
  'io.modelcontextprotocol/clientCapabilities': { elicitation: { form: {} } },
};

/** One round of the refund as the v2 client sends it: the continuation adds `extra` params. */
export function refundRound(
  url: string,
  id: number,
  order: string,
  extra: Record<string, unknown> = {},
  headers: Record<string, string> = {},
): Promise<RawMcpResponse> {
  return postMcp(
    url,
    {
      jsonrpc: '2.0',
      id,
      method: 'tools/call',
      params: { name: 'refund', arguments: { order_id: order, amount: 7 }, ...extra, _meta: META },
    },
    {
      'mcp-protocol-version': MODERN_REVISION,
      'mcp-method': 'tools/call',
      'mcp-name': 'refund',
      ...headers,
    },
  );
}

/** The params a continuation adds: the answer to "confirm" and the echoed requestState. */
export function continuation(order: string, action: 'accept' | 'decline' = 'accept') {
  return {
    inputResponses: {
      confirm: action === 'accept' ? { action, content: { confirm: true } } : { action },
    },
    requestState: `confirm:${order}`,
  };
}
