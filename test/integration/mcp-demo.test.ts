// The MCP demo (`npm run demo:mcp`). An SDK agent loop whose refund call times out and is
// retried executes the tool twice on the server directly and once through the proxy's MCP route;
// the counts come from the servers themselves and from the built script's own output.
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { type McpRefundServer, startMcpRefundServer } from '../../src/demo/mcp-refund-server';
import {
  MCP_DEMO_TIMING,
  mcpDemoProxyYaml,
  tellMcpRefundStory,
  tellMcpTaskStory,
} from '../../src/demo/run-mcp-demo';
import { type McpReportServer, startMcpReportServer } from '../../src/demo/mcp-report-server';
import { databaseUrl, startProxy, type TestProxy, uniqueTable } from '../support/proxy';
import { recordFigures } from '../support/run-report';

let direct: McpRefundServer;
let proxied: McpRefundServer;
let reports: McpReportServer;
let proxy: TestProxy;

beforeAll(async () => {
  direct = await startMcpRefundServer({ firstDelayMs: MCP_DEMO_TIMING.firstDelayMs });
  proxied = await startMcpRefundServer({ firstDelayMs: MCP_DEMO_TIMING.firstDelayMs });
  reports = await startMcpReportServer({ buildMs: MCP_DEMO_TIMING.reportBuildMs });
  proxy = await startProxy({ yaml: mcpDemoProxyYaml(proxied.origin, reports.origin, 0, 0) });
});

afterAll(async () => {
  await proxy?.close();
  await Promise.all([direct?.close(), proxied?.close(), reports?.close()]);
});

test('a timed-out, retried refund call executes twice on the server directly and once through the proxy', async () => {
  const lines: string[] = [];
  const result = await tellMcpRefundStory({
    direct,
    proxied,
    proxyMcpUrl: `${proxy.url}/mcp`,
    orderId: 'ord_mcp_demo',
    print: (line) => lines.push(line),
  });

  expect(result.withoutProxy).toMatchObject({ attempts: 2, refunds: 2 });
  expect(direct.refunds).toHaveLength(2);

  expect(result.withProxy).toMatchObject({ attempts: 2, refunds: 1 });
  expect(proxied.refunds).toHaveLength(1);
  // The retry got the result of the one execution: the slow first run, not a new one.
  expect(result.withProxy.refundId).toBe(proxied.refunds[0]!.refundId);
  expect(proxy.logs.some((line) => line.tool === 'refund')).toBe(true);

  const story = lines.join('\n');
  expect(story).toContain('attempt 1: MCP error -32001: Request timed out; retrying');
  expect(story).toContain('the server executed refund 2 times');
  expect(story).toContain('the server executed refund 1 time (');
});

test('the slow report becomes a task; the restarted agent polls it with the saved id to the result, built once', async () => {
  const lines: string[] = [];
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mcp-demo-task-'));
  try {
    const story = await tellMcpTaskStory({
      server: reports,
      url: `${proxy.url}/reports/mcp`,
      month: '2026-11',
      taskFile: path.join(dir, 'task-id'),
      print: (line) => lines.push(line),
    });
    expect(story).toMatchObject({ tookTask: true, reports: 1, task: { status: 'completed' } });
    // It was still running when the agent came back: at least one poll said so.
    expect(story.polls).toBeGreaterThan(1);
    expect(reports.reports).toEqual(['2026-11']);
    expect(lines.join('\n')).toContain('report 2026-11: 1,284 refunds');
    expect(proxy.logs).toContainEqual(
      expect.objectContaining({ route: 'reports', outcome: 'deferred', tool: 'monthly_report' }),
    );
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('node dist/demo/run-mcp-demo.js prints 2 executions without the proxy, 1 through it, and exits 0', async () => {
  const script = path.resolve(__dirname, '../../dist/demo/run-mcp-demo.js');
  const { stdout } = await promisify(execFile)(process.execPath, [script], {
    env: {
      ...process.env,
      DATABASE_URL: databaseUrl(),
      IDEMPOTENCY_PROXY_TABLE: uniqueTable('mcp_demo'),
    },
    timeout: 60_000,
  });
  const executed = [...stdout.matchAll(/the server executed refund (\d+) times?/g)].map((m) =>
    Number(m[1]),
  );
  expect(executed).toEqual([2, 1]);
  const summary =
    /Refunds executed: (\d+) without the proxy, (\d+) through it; the slow report ran (\d+) time/.exec(
      stdout,
    );
  expect(summary?.slice(1).map(Number)).toEqual([2, 1, 1]);
  expect(stdout).toMatch(/the call came back as a task \(working\)/);
  recordFigures(__filename, 'story', stdout.split('\n'));
}, 90_000);
