// An MCP agent loop the way agent frameworks run one: the official SDK Client over Streamable HTTP,
// each tool call with a timeout, and on any error the same call again after a backoff (as the
// OpenAI Agents SDK's MCP `max_retry_attempts` does). It sends no idempotency key: through an MCP
// route the proxy derives one from the tool name and its arguments (src/mcp/README.md).
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

export interface McpAgentLoopOptions {
  /** The MCP endpoint the agent is configured with: the server itself, or the proxy in front. */
  readonly url: string;
  /** The arguments the "model" emitted once; every retry resends them unchanged. */
  readonly args: { readonly order_id: string; readonly amount: number };
  /** Per-attempt timeout of `callTool` (the SDK's RequestOptions.timeout). */
  readonly timeoutMs: number;
  /** Retries after the first attempt (max_retry_attempts). */
  readonly maxRetryAttempts: number;
  /** Backoff before retry n is backoffMs × 2^(n-1). */
  readonly backoffMs: number;
  /** Prints one line of the story, already indented by the caller's label. */
  readonly print: (line: string) => void;
}

export interface McpAgentLoopResult {
  /** Attempts the refund call took, the successful one included. */
  readonly attempts: number;
  /** The refund id in the tool result the agent ended up with. */
  readonly refundId: string | undefined;
}

export async function runMcpAgentLoop(options: McpAgentLoopOptions): Promise<McpAgentLoopResult> {
  const client = new Client({ name: 'demo-agent', version: '1.0.0' });
  // A late answer to a timed-out attempt lands here ("unknown message ID"); the agent has moved on.
  client.onerror = () => undefined;
  const transport = new StreamableHTTPClientTransport(new URL(options.url));
  await client.connect(transport);
  try {
    for (let attempt = 1; ; attempt++) {
      const started = Date.now();
      try {
        const result = await client.callTool(
          { name: 'refund', arguments: { ...options.args } },
          undefined,
          { timeout: options.timeoutMs },
        );
        const refundId = refundIdOf(result);
        options.print(
          `attempt ${attempt}: refund ${refundId ?? '?'} after ${Date.now() - started} ms`,
        );
        return { attempts: attempt, refundId };
      } catch (error) {
        const what = error instanceof Error ? error.message : String(error);
        if (attempt > options.maxRetryAttempts) {
          options.print(`attempt ${attempt}: ${what}; giving up`);
          throw error;
        }
        const backoffMs = options.backoffMs * 2 ** (attempt - 1);
        options.print(`attempt ${attempt}: ${what}; retrying in ${backoffMs} ms`);
        await new Promise((resolve) => setTimeout(resolve, backoffMs));
      }
    }
  } finally {
    // A session server keeps the session until DELETE: end it like a polite client.
    await transport.terminateSession().catch(() => undefined);
    await client.close();
  }
}

function refundIdOf(result: unknown): string | undefined {
  const content = (result as { content?: { type: string; text?: string }[] }).content ?? [];
  const text = content.find((block) => block.type === 'text')?.text;
  try {
    const parsed = JSON.parse(text ?? '') as { refundId?: unknown };
    return typeof parsed.refundId === 'string' ? parsed.refundId : undefined;
  } catch {
    return undefined;
  }
}
