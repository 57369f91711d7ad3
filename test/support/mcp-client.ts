// Connects the official SDK client (Client + StreamableHTTPClientTransport) to a URL, as an agent
// would, plus raw JSON-RPC helpers for the tests that check exact wire shapes.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

export interface McpClientOptions {
  /**
   * Extra headers for one outgoing request, given its JSON-RPC body: e.g. an Idempotency-Key only
   * on a tools/call. Called for every POST.
   */
  readonly headersFor?: (body: unknown) => Record<string, string> | undefined;
}

export interface ConnectedClient {
  readonly client: Client;
  readonly transport: StreamableHTTPClientTransport;
  close(): Promise<void>;
}

export async function connectMcpClient(
  url: string,
  options: McpClientOptions = {},
): Promise<ConnectedClient> {
  const headersFor = options.headersFor;
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    fetch: async (input, init) => {
      const extra =
        headersFor && typeof init?.body === 'string'
          ? headersFor(JSON.parse(init.body))
          : undefined;
      if (!extra) return fetch(input, init);
      const headers = new Headers(init?.headers);
      for (const [name, value] of Object.entries(extra)) headers.set(name, value);
      return fetch(input, { ...init, headers });
    },
  });
  const client = new Client({ name: 'mcp-route-tests', version: '1.0.0' });
  await client.connect(transport);
  return {
    client,
    transport,
    async close() {
      // A session server keeps the session until DELETE; terminate it like a polite agent.
      if (transport.sessionId) await transport.terminateSession().catch(() => undefined);
      await client.close();
    },
  };
}

/** The first text content of a tool result, parsed as JSON when it is JSON. */
export function resultText(result: unknown): string {
  const content = (result as { content?: { type: string; text?: string }[] }).content ?? [];
  const text = content.find((block) => block.type === 'text')?.text;
  if (text === undefined) throw new Error(`no text content in ${JSON.stringify(result)}`);
  return text;
}

export interface RawMcpResponse {
  readonly status: number;
  readonly headers: Headers;
  readonly text: string;
  /** The JSON-RPC messages: the body itself for JSON, each `data:` event for SSE. */
  readonly messages: Record<string, unknown>[];
}

/** POSTs one JSON-RPC body (object or batch) the way a Streamable HTTP client does. */
export async function postMcp(
  url: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<RawMcpResponse> {
  const res = await fetch(url, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      ...headers,
    },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  return {
    status: res.status,
    headers: res.headers,
    text,
    messages: parseMessages(res.headers, text),
  };
}

export function parseMessages(headers: Headers, text: string): Record<string, unknown>[] {
  const type = headers.get('content-type') ?? '';
  if (type.startsWith('text/event-stream')) {
    const messages: Record<string, unknown>[] = [];
    for (const event of text.split(/\r?\n\r?\n/)) {
      const data = event
        .split(/\r?\n/)
        .filter((line) => line.startsWith('data:'))
        .map((line) => line.slice(5).trimStart())
        .join('\n');
      if (data) messages.push(JSON.parse(data) as Record<string, unknown>);
    }
    return messages;
  }
  if (!text) return [];
  const parsed = JSON.parse(text) as Record<string, unknown> | Record<string, unknown>[];
  return Array.isArray(parsed) ? parsed : [parsed];
}

/** The JSON-RPC response (result or error) among the messages, i.e. the one with an `id` and no `method`. */
export function finalMessage(response: RawMcpResponse): Record<string, unknown> {
  const final = response.messages.find((message) => 'id' in message && !('method' in message));
  if (!final) throw new Error(`no JSON-RPC response in ${response.status} ${response.text}`);
  return final;
}

export const INITIALIZE = {
  jsonrpc: '2.0',
  id: 'init-1',
  method: 'initialize',
  params: {
    protocolVersion: '2025-06-18',
    capabilities: {},
    clientInfo: { name: 'raw-test', version: '1.0.0' },
  },
} as const;

/**
 * Opens a session (or a stateless exchange) by hand: initialize + notifications/initialized.
 * Returns the headers later requests must carry.
 */
export async function rawHandshake(
  url: string,
  protocolVersion = '2025-06-18',
): Promise<Record<string, string>> {
  const init = await postMcp(url, {
    ...INITIALIZE,
    params: { ...INITIALIZE.params, protocolVersion },
  });
  if (init.status !== 200) throw new Error(`initialize answered ${init.status}: ${init.text}`);
  const session = init.headers.get('mcp-session-id');
  const headers: Record<string, string> = { 'mcp-protocol-version': protocolVersion };
  if (session) headers['mcp-session-id'] = session;
  const ack = await postMcp(url, { jsonrpc: '2.0', method: 'notifications/initialized' }, headers);
  if (ack.status !== 202)
    throw new Error(`notifications/initialized answered ${ack.status}: ${ack.text}`);
  return headers;
}

export function toolCall(
  id: string | number,
  name: string,
  args: Record<string, unknown>,
  params: Record<string, unknown> = {},
): Record<string, unknown> {
  return { jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args, ...params } };
}
