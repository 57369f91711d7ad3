// MCP tasks from both ends, with the official SDK v2 (protocol revision 2026-07-28):
//
//   startSlowToolServer  an unmodified @modelcontextprotocol/server with tools that take their time
//                        and know nothing of tasks; a client that hangs up cancels its call (the
//                        request's abort signal, as the 2026-07-28 revision asks of HTTP)
//   connectTaskClient    an SDK client with the tasks extension's requester
//                        (@modelcontextprotocol/ext-tasks): it declares the extension, takes a
//                        task, polls tasks/get, resumes by id and cancels
//
// The ext-tasks session needs a raw dispatch: the SDK client itself refuses a `resultType: "task"`
// answer and strips `resultType` from tasks/get's, so task messages go over the client's own
// transport (its headers, Mcp-Name included) and their answers are taken before the client sees them.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import {
  createTaskSessionFromClient,
  DispatchError,
  type RawClientDispatch,
} from '@modelcontextprotocol/ext-tasks/client';
import { createMcpHandler, McpServer } from '@modelcontextprotocol/server';
import { z } from 'zod';
import type { RecordedRequest } from './mcp-tool-server';
import { MODERN_REVISION, serveFetchHandler } from './mcp-modern-server';

export interface SlowToolServer {
  readonly url: string;
  readonly received: RecordedRequest[];
  /** Runs of `report` that started, by their `name` argument. */
  started(name: string): number;
  /** Runs of `report` whose client cancelled them before they were done. */
  cancelled(name: string): number;
  close(): Promise<void>;
}

/**
 * `report({ name, seconds })` waits `seconds`, then answers `report <name> ready`; `fail` answers a
 * JSON-RPC error after `seconds`; `broken` answers isError: true after `seconds`.
 */
export async function startSlowToolServer(): Promise<SlowToolServer> {
  const received: RecordedRequest[] = [];
  const starts = new Map<string, number>();
  const cancels = new Map<string, number>();
  const count = (map: Map<string, number>, name: string): void => {
    map.set(name, (map.get(name) ?? 0) + 1);
  };
  const wait = (seconds: number, signal: AbortSignal | undefined): Promise<boolean> =>
    new Promise((resolve) => {
      const timer = setTimeout(() => resolve(true), seconds * 1000);
      signal?.addEventListener('abort', () => {
        clearTimeout(timer);
        resolve(false);
      });
    });
  const handler = createMcpHandler(() => {
    const server = new McpServer({ name: 'slow-tool-server', version: '1.0.0' });
    const input = z.object({ name: z.string(), seconds: z.number() });
    server.registerTool('report', { inputSchema: input }, async ({ name, seconds }, ctx) => {
      count(starts, name);
      if (!(await wait(seconds, ctx.mcpReq.signal))) {
        count(cancels, name);
        throw new Error('cancelled');
      }
      return { content: [{ type: 'text', text: `report ${name} ready` }] };
    });
    server.registerTool('broken', { inputSchema: input }, async ({ name, seconds }, ctx) => {
      count(starts, name);
      await wait(seconds, ctx.mcpReq.signal);
      return { content: [{ type: 'text', text: `report ${name} failed` }], isError: true };
    });
    return server;
  });
  const { server, origin } = await serveFetchHandler(handler, received);
  return {
    url: `${origin}/mcp`,
    received,
    started: (name) => starts.get(name) ?? 0,
    cancelled: (name) => cancels.get(name) ?? 0,
    async close() {
      await handler.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

export type TaskSession = ReturnType<typeof createTaskSessionFromClient>;

export interface TaskClient {
  readonly client: Client;
  readonly session: TaskSession;
  close(): Promise<void>;
}

const CLIENT_INFO = { name: 'mcp-task-tests', version: '1.0.0' };

/**
 * An SDK client on 2026-07-28 with the tasks requester. `endpointId` names the server for the
 * requester (a task is resumed through a session with the same one); `headers` go on every request
 * (a tenant).
 */
export async function connectTaskClient(
  url: string,
  options: { endpointId?: string; headers?: Record<string, string> } = {},
): Promise<TaskClient> {
  const client = new Client(CLIENT_INFO, {
    versionNegotiation: { mode: { pin: MODERN_REVISION } },
  });
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: options.headers ?? {} },
    fetch: fetchParsingHere,
  });
  await client.connect(transport);
  const session = createTaskSessionFromClient(client, {
    endpointId: options.endpointId ?? 'idempotency-proxy',
    rawDispatch: rawDispatch(transport),
    v2RequestFraming: {
      protocolVersion: client.getNegotiatedProtocolVersion() ?? MODERN_REVISION,
      clientInfo: CLIENT_INFO,
      clientCapabilities: {},
    },
  });
  return { client, session, close: () => client.close() };
}

/**
 * fetch, with JSON bodies parsed in this test's own realm: jest runs a test in a context of its own,
 * and an object that Node's fetch parsed has the outer Object.prototype, which the tasks
 * requester's JSON check (a plain object's prototype is Object.prototype) takes for not JSON.
 */
const fetchParsingHere: typeof fetch = async (input, init) => {
  const answer = await fetch(input, init);
  return Object.assign(answer, {
    json: async (): Promise<unknown> => JSON.parse(await answer.text()) as unknown,
  });
};

/**
 * Sends a task message over the client's transport under an id of its own and takes its answer
 * before the SDK client sees it; an HTTP error whose body is a JSON-RPC error is that error.
 */
function rawDispatch(transport: StreamableHTTPClientTransport): RawClientDispatch {
  type Answer = Awaited<ReturnType<RawClientDispatch>>;
  const pending = new Map<string, (answer: Answer) => void>();
  let sequence = 0;
  // The client's handler, installed by connect(); it is handed everything that is not ours.
  const toClient = transport.onmessage as ((...args: unknown[]) => void) | undefined;
  transport.onmessage = ((message: { id?: unknown }, ...rest: unknown[]) => {
    const id = message.id;
    const settle = typeof id === 'string' ? pending.get(id) : undefined;
    if (settle === undefined) return toClient?.call(transport, message, ...rest);
    pending.delete(id as string);
    const { result, error } = message as { result?: unknown; error?: unknown };
    settle(
      error === undefined
        ? ({ kind: 'result', result } as Answer)
        : ({ kind: 'error', error } as Answer),
    );
  }) as typeof transport.onmessage;
  return async (request, options) => {
    const message = request as { readonly method?: string };
    const id = `tasks:${++sequence}`;
    const answer = new Promise<Answer>((resolve, reject) => {
      pending.set(id, resolve);
      options?.signal?.addEventListener('abort', () => {
        pending.delete(id);
        reject(options.signal!.reason as Error);
      });
    });
    try {
      await transport.send(
        { jsonrpc: '2.0', id, ...message } as never,
        {
          headers: options?.context?.headers,
        } as never,
      );
    } catch (error) {
      pending.delete(id);
      const text = (error as { data?: { text?: unknown } }).data?.text;
      if (typeof text === 'string') {
        try {
          const message = JSON.parse(text) as { error?: { code?: unknown } };
          if (typeof message.error?.code === 'number')
            return { kind: 'error', error: message.error } as Answer;
        } catch {
          // not JSON: a transport failure
        }
      }
      throw new DispatchError(`${message.method} failed: ${String(error)}`, false, {
        cause: error,
      });
    }
    return answer;
  };
}
