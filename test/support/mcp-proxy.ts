// The proxy configured for MCP routes (src/mcp/README.md) in front of one tool server: `/mcp` waits
// on a concurrent duplicate, `/reject-mcp` answers it at once, `/retry-mcp` lets a repeat take over
// an unknown outcome after a short lease. Every route protects `refund*` and `fail_refund` and
// leaves `arguments.trace_id` out of fingerprint and derived key.
import { until } from './eventually';
import { startProxy, type TestProxy } from './proxy';

export interface McpProxyOptions {
  readonly databaseUrl?: string;
  /** Share a key table with another proxy instance. */
  readonly table?: string;
}

export function mcpProxyYaml(upstreamOrigin: string): string {
  const mcp = `mcp: { tools: ["refund*", fail_refund], ignore: [arguments.trace_id] }`;
  return `
store: { table: "\${TEST_TABLE}" }
upstreams:
  toolserver: { url: ${upstreamOrigin}, timeout: 5s }
routes:
  - name: tools
    match: { path: /mcp }
    upstream: toolserver
    idempotency:
      onConcurrent: wait
      waitTimeout: 5s
      ${mcp}
  - name: tools-reject
    match: { path: /reject-mcp }
    upstream: toolserver
    idempotency:
      onConcurrent: reject
      lockTimeout: 10s
      ${mcp}
  - name: tools-retry
    match: { path: /retry-mcp }
    upstream: toolserver
    idempotency:
      onConcurrent: reject
      unknownOutcome: retry
      lockTimeout: 1s
      ${mcp}
`;
}

export function startMcpProxy(
  upstreamOrigin: string,
  options: McpProxyOptions = {},
): Promise<TestProxy> {
  return startProxy({ yaml: mcpProxyYaml(upstreamOrigin), ...options });
}

/**
 * The proxy's request log lines that name a tool (a line is written just after its response ends),
 * once there are `count` of them — or, after `timeoutMs`, the ones there are, for the caller's
 * assertion to report.
 */
export async function toolLogLines(
  proxy: TestProxy,
  count: number,
  timeoutMs = 2_000,
): Promise<Record<string, unknown>[]> {
  const lines = () =>
    proxy.logs.filter((line) => line.msg === 'request' && line.tool !== undefined);
  await until(() => lines().length >= count, `${count} tool log lines`, { timeoutMs }).catch(
    () => undefined,
  );
  return lines();
}

let counter = 0;
/** A fresh order id, so tests never share a derived key. */
export function orderId(label: string): string {
  counter += 1;
  return `${label}-${process.pid}-${Date.now().toString(36)}-${counter}`;
}
