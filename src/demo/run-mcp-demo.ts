// `npm run demo:mcp`: the refund story over MCP. The same agent loop (SDK client, a timeout, a
// retry on any error, no idempotency key) calls the same `refund` tool twice over: once on an MCP
// server directly, once on an identical server behind the built proxy with an MCP route. Uses the
// embedded PostgreSQL under .data/demo-postgres, or DATABASE_URL when set.
//
//   t=0      attempt 1 sent ─────────────── the tool's first run (1500 ms) ──────────── refund
//   t=1000   attempt 1 times out (the SDK also sends notifications/cancelled)
//   t=1200   attempt 2 sent:  directly → a second execution, a second refund
//                             proxy    → same derived key, waits for the first run, gets its result
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { findFreePort } from '../embedded/embedded';
import { startBuiltProxy, runDemo } from './built-proxy';
import { runMcpAgentLoop } from './mcp-agent-loop';
import { type McpRefundServer, startMcpRefundServer } from './mcp-refund-server';

export const MCP_DEMO_TIMING = {
  /** The tool's first run: longer than the agent's timeout. */
  firstDelayMs: 1_500,
  timeoutMs: 1_000,
  backoffMs: 200,
  maxRetryAttempts: 3,
} as const;

/** The proxy config of this demo: one MCP route protecting `refund`, keyed by tool + arguments. */
export function mcpDemoProxyYaml(upstreamOrigin: string, port: number, adminPort: number): string {
  return `listen: { host: 127.0.0.1, port: ${port} }
admin: { host: 127.0.0.1, port: ${adminPort} }
store:
  url: \${DATABASE_URL:-}
  dataDir: \${IDEMPOTENCY_PROXY_DATA_DIR:-.data/demo-postgres}
  table: \${IDEMPOTENCY_PROXY_TABLE:-mcp_demo_keys}
upstreams:
  refunds: { url: ${upstreamOrigin}, timeout: 30s }
routes:
  - name: tools
    match: { path: /mcp }            # POST tools/call protected; initialize, GET, DELETE pass
    upstream: refunds
    idempotency:
      onConcurrent: wait             # a retry while the first call runs waits for its result
      mcp: { tools: [refund], window: 10m }
`;
}

export interface McpStoryOptions {
  /** The server the agent calls directly. */
  readonly direct: McpRefundServer;
  /** The server behind the proxy. */
  readonly proxied: McpRefundServer;
  /** The proxy's MCP endpoint (its route to `proxied`). */
  readonly proxyMcpUrl: string;
  /** The order to refund: new per run, or a derived key from an earlier run would replay. */
  readonly orderId: string;
  readonly print: (line: string) => void;
}

export interface McpRun {
  readonly attempts: number;
  /** Refunds the server made during this run: the execution count. */
  readonly refunds: number;
  readonly refundId: string | undefined;
}

export interface McpStoryResult {
  readonly withoutProxy: McpRun;
  readonly withProxy: McpRun;
}

export async function tellMcpRefundStory(options: McpStoryOptions): Promise<McpStoryResult> {
  const { print } = options;
  const args = { order_id: options.orderId, amount: 49.99 };
  const t = MCP_DEMO_TIMING;
  print(
    `An MCP agent calls refund(${JSON.stringify(args)}). The tool's first run takes ${t.firstDelayMs} ms; the agent times out after ${t.timeoutMs} ms and retries (up to ${t.maxRetryAttempts} times, no idempotency key).`,
  );
  const run = async (label: string, server: McpRefundServer, url: string): Promise<McpRun> => {
    print('');
    print(`${label}:`);
    const before = server.refunds.length;
    const loop = await runMcpAgentLoop({
      url,
      args,
      timeoutMs: t.timeoutMs,
      maxRetryAttempts: t.maxRetryAttempts,
      backoffMs: t.backoffMs,
      print: (line) => print(`  ${line}`),
    });
    await server.idle(); // the timed-out first run still finishes its refund
    const made = server.refunds.slice(before).map((refund) => refund.refundId);
    print(
      `  → ${loop.attempts} attempts; the server executed refund ${made.length} time${made.length === 1 ? '' : 's'} (${made.join(', ')}).`,
    );
    return { attempts: loop.attempts, refunds: made.length, refundId: loop.refundId };
  };
  const withoutProxy = await run('Straight to the MCP server', options.direct, options.direct.url);
  const withProxy = await run('Through idempotency-proxy', options.proxied, options.proxyMcpUrl);
  return { withoutProxy, withProxy };
}

async function main(): Promise<number> {
  const timing = { firstDelayMs: MCP_DEMO_TIMING.firstDelayMs };
  const direct = await startMcpRefundServer(timing);
  const proxied = await startMcpRefundServer(timing);
  const [port, adminPort] = [await findFreePort(), await findFreePort()];
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mcp-demo-'));
  const configFile = path.join(dir, 'proxy.yaml');
  fs.writeFileSync(configFile, mcpDemoProxyYaml(proxied.origin, port, adminPort));
  const cleanUp = async () => {
    await Promise.all([direct.close(), proxied.close()]);
    fs.rmSync(dir, { recursive: true, force: true });
  };
  const print = (line: string) => process.stdout.write(`${line}\n`);
  print(
    `Two identical MCP servers (official SDK, session mode); idempotency-proxy on port ${port} in front of the second.`,
  );
  const proxy = await startBuiltProxy({
    configFile,
    readyUrl: `http://127.0.0.1:${adminPort}/readyz`,
  }).catch(async (error: unknown) => {
    await cleanUp();
    throw error;
  });
  try {
    print('');
    const result = await tellMcpRefundStory({
      direct,
      proxied,
      proxyMcpUrl: `http://127.0.0.1:${port}/mcp`,
      orderId: `ord_${Date.now().toString(36)}`,
      print,
    });
    const ok = result.withoutProxy.refunds === 2 && result.withProxy.refunds === 1;
    print('');
    print(
      `${ok ? '' : 'UNEXPECTED: '}Refunds executed: ${result.withoutProxy.refunds} without the proxy, ${result.withProxy.refunds} through it.`,
    );
    return ok ? 0 : 1;
  } finally {
    await proxy.close();
    await cleanUp();
  }
}

if (require.main === module) runDemo(main, 'MCP demo');
