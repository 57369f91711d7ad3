// `npm run demo:mcp`: the refund story over MCP. The same agent loop (SDK client, a timeout, a
// retry on any error, no idempotency key) calls the same `refund` tool twice over: once on an MCP
// server directly, once on an identical server behind the built proxy with an MCP route. Uses the
// embedded PostgreSQL under .data/demo-postgres, or DATABASE_URL when set.
//
//   t=0      attempt 1 sent ─────────────── the tool's first run (1500 ms) ──────────── refund
//   t=1000   attempt 1 times out (the SDK also sends notifications/cancelled)
//   t=1200   attempt 2 sent:  directly → a second execution, a second refund
//                             proxy    → same derived key, waits for the first run, gets its result
//
// Then a second act: a slow `monthly_report` tool on an SDK v2 server (revision 2026-07-28) behind
// a route with mcp.tasks. An agent that takes tasks gets one after `after`, saves its id and stops;
// restarted, it polls tasks/get with the saved id until the report is done. The tool ran once.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { findFreePort } from '../embedded/embedded';
import { startBuiltProxy, runDemo } from './built-proxy';
import { runMcpAgentLoop } from './mcp-agent-loop';
import { type McpRefundServer, startMcpRefundServer } from './mcp-refund-server';
import { type McpReportServer, startMcpReportServer } from './mcp-report-server';
import { callTool, type DemoTask, pollTask } from './mcp-task-agent';

export const MCP_DEMO_TIMING = {
  /** The tool's first run: longer than the agent's timeout. */
  firstDelayMs: 1_500,
  timeoutMs: 1_000,
  backoffMs: 200,
  maxRetryAttempts: 3,
  /** The report tool's run, and when a call becomes a task: the route's mcp.tasks.after. */
  reportBuildMs: 2_500,
  taskAfter: '700ms',
  taskPollInterval: '400ms',
} as const;

/**
 * The proxy config of this demo: an MCP route protecting `refund`, keyed by tool + arguments, and
 * one in front of the report server whose slow calls become tasks.
 */
export function mcpDemoProxyYaml(
  upstreamOrigin: string,
  reportsOrigin: string,
  port: number,
  adminPort: number,
): string {
  const t = MCP_DEMO_TIMING;
  return `listen: { host: 127.0.0.1, port: ${port} }
admin: { host: 127.0.0.1, port: ${adminPort} }
store:
  url: \${DATABASE_URL:-}
  dataDir: \${IDEMPOTENCY_PROXY_DATA_DIR:-.data/demo-postgres}
  table: \${IDEMPOTENCY_PROXY_TABLE:-mcp_demo_keys}
upstreams:
  refunds: { url: ${upstreamOrigin}, timeout: 30s }
  reports: { url: ${reportsOrigin}, timeout: 60s }
routes:
  - name: tools
    match: { path: /mcp }            # POST tools/call protected; initialize, GET, DELETE pass
    upstream: refunds
    idempotency:
      onConcurrent: wait             # a retry while the first call runs waits for its result
      mcp: { tools: [refund], window: 10m }
  - name: reports
    match: { path: /reports/mcp }
    upstream: reports
    idempotency:
      lockTimeout: 2m                # longer than the slowest report
      mcp: { tools: [monthly_report], tasks: { after: ${t.taskAfter}, pollInterval: ${t.taskPollInterval} } }
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

export interface McpTaskStory {
  /** The call came back as a task (not its result). */
  readonly tookTask: boolean;
  /** Polls the restarted agent made, and what the last one said. */
  readonly polls: number;
  readonly task: DemoTask | undefined;
  /** Reports the server built during the act: the executions. */
  readonly reports: number;
}

/**
 * The task act: an agent that takes tasks calls the slow report tool through the proxy, gets a
 * task, saves its id and stops; restarted, it polls the task with the saved id until it is done.
 */
export async function tellMcpTaskStory(options: {
  readonly server: McpReportServer;
  /** The proxy's MCP endpoint for the report server. */
  readonly url: string;
  readonly month: string;
  /** Where the agent keeps the task id across its restart. */
  readonly taskFile: string;
  readonly print: (line: string) => void;
}): Promise<McpTaskStory> {
  const { print, url } = options;
  const before = options.server.reports.length;
  print('');
  print(
    `A slow tool becomes a task: monthly_report({"month":"${options.month}"}) takes ${MCP_DEMO_TIMING.reportBuildMs} ms. The agent declares the MCP tasks extension; the proxy's route answers calls still running after ${MCP_DEMO_TIMING.taskAfter} with a task.`,
  );
  const started = Date.now();
  const answer = await callTool(url, 'monthly_report', { month: options.month });
  if (answer.kind === 'result') {
    print(`  the call answered at once: ${answer.text}`);
    return {
      tookTask: false,
      polls: 0,
      task: undefined,
      reports: options.server.reports.length - before,
    };
  }
  print(
    `  after ${Date.now() - started} ms the call came back as a task (${answer.task.status}), id ${answer.task.taskId.slice(0, 12)}…`,
  );
  fs.writeFileSync(options.taskFile, answer.task.taskId);
  print('  the agent saves the task id and stops (a crash, a deploy); the tool keeps running.');
  print('  the agent starts again, reads the task id and polls tasks/get:');
  const saved = fs.readFileSync(options.taskFile, 'utf8');
  let polls = 0;
  const task = await pollTask(url, saved, (seen) => {
    polls += 1;
    print(`    ${seen.status}`);
  });
  const text = task.result?.content?.[0]?.text ?? task.error?.message ?? '';
  const reports = options.server.reports.length - before;
  print(
    `  → ${task.status}: ${text}; the server built the report ${reports} time${reports === 1 ? '' : 's'}.`,
  );
  return { tookTask: true, polls, task, reports };
}

async function main(): Promise<number> {
  const timing = { firstDelayMs: MCP_DEMO_TIMING.firstDelayMs };
  const direct = await startMcpRefundServer(timing);
  const proxied = await startMcpRefundServer(timing);
  const reports = await startMcpReportServer({ buildMs: MCP_DEMO_TIMING.reportBuildMs });
  const [port, adminPort] = [await findFreePort(), await findFreePort()];
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mcp-demo-'));
  const configFile = path.join(dir, 'proxy.yaml');
  fs.writeFileSync(configFile, mcpDemoProxyYaml(proxied.origin, reports.origin, port, adminPort));
  const cleanUp = async () => {
    await Promise.all([direct.close(), proxied.close(), reports.close()]);
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
    const tasks = await tellMcpTaskStory({
      server: reports,
      url: `http://127.0.0.1:${port}/reports/mcp`,
      month: new Date().toISOString().slice(0, 7),
      taskFile: path.join(dir, 'task-id'),
      print,
    });
    const ok =
      result.withoutProxy.refunds === 2 &&
      result.withProxy.refunds === 1 &&
      tasks.tookTask &&
      tasks.task?.status === 'completed' &&
      tasks.reports === 1;
    print('');
    print(
      `${ok ? '' : 'UNEXPECTED: '}Refunds executed: ${result.withoutProxy.refunds} without the proxy, ${result.withProxy.refunds} through it; the slow report ran ${tasks.reports} time${tasks.reports === 1 ? '' : 's'}, as a task the agent resumed after its restart.`,
    );
    return ok ? 0 : 1;
  } finally {
    await proxy.close();
    await cleanUp();
  }
}

if (require.main === module) runDemo(main, 'MCP demo');
