// An agent-like loop calling the demo payments service (which refunds again on every POST) through the
// proxy, with a client timeout shorter than the service takes: the refund call times out, the agent
// retries, and the proxy makes sure exactly one refund happens. Two ways of keying the call:
//
//   explicit  the client helper: stepKey({ runId, step, tool }) + idempotentFetch
//   derived   no key at all: plain fetch; the proxy derives the key from the body
//             (route config `key: { derive: [body], window: 10m }`)
//
// `node dist/demo/agent-loop.js` runs both against the bundled payments service and the built proxy.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { idempotentFetch, stepKey } from 'idempotency-proxy-client';
import { findFreePort } from '../embedded/embedded';
import { startBuiltProxy, runDemo } from './built-proxy';
import { startPaymentsService } from './payments-service';

export interface AgentLoopOptions {
  /** The proxy's base URL (the agent's only base URL). */
  readonly baseUrl: string;
  /** How the refund call is keyed: `explicit` (stepKey) or `derived` (no key; the proxy derives it). */
  readonly keying: 'explicit' | 'derived';
  /** Generated once per run and kept when it resumes. */
  readonly runId: string;
  /** The order to refund. */
  readonly order: string;
  /** Client-side timeout of one attempt: shorter than the service, so the first attempt times out. */
  readonly attemptTimeoutMs: number;
  /** Latency injected into the payments service (its `?slow=` parameter). */
  readonly serviceDelayMs: number;
  readonly print: (line: string) => void;
}

export interface AgentLoopResult {
  /** The refund the agent ended up with. */
  readonly refundId: string | undefined;
  /** Attempts the refund call took. */
  readonly attempts: number;
  /** True when the final answer was replayed by the proxy. */
  readonly replayed: boolean;
  /** Refunds the service reports for this order at the end. */
  readonly refundsForOrder: number;
}

interface ToolCall {
  readonly tool: string;
  readonly method: 'GET' | 'POST';
  readonly path: string;
  /** Saved when the "model" emitted them, and resent unchanged on every retry. */
  readonly args?: Record<string, unknown>;
}

interface Observation {
  readonly status: number;
  readonly body: Record<string, unknown>;
  readonly attempts: number;
  readonly replayed: boolean;
}

const RETRY = { maxAttempts: 6, baseDelayMs: 100, maxDelayMs: 300 };

/** Plays one agent run: the plan's tool calls in order, each observed and printed. */
export async function runAgentLoop(options: AgentLoopOptions): Promise<AgentLoopResult> {
  const { print } = options;
  const plan: ToolCall[] = [
    { tool: 'check_payments', method: 'GET', path: '/health' },
    {
      tool: 'refund_order',
      method: 'POST',
      path: `/refunds?slow=${options.serviceDelayMs}`,
      args: { order: options.order, amount: 49.99, reason: 'Accidental double charge' },
    },
    { tool: 'list_refunds', method: 'GET', path: '/refunds' },
  ];
  print(`Agent run ${options.runId} (${options.keying} keys):`);
  let refund: Observation | undefined;
  let refundsForOrder = 0;
  for (const [step, call] of plan.entries()) {
    const seen = await callTool(options, step, call);
    if (call.tool === 'refund_order') {
      refund = seen;
      const how = seen.replayed ? ', replayed by the proxy' : '';
      print(
        `  step ${step} ${call.tool}: ${seen.status} refund ${String(seen.body.id)} after ${seen.attempts} attempts${how} (upstream saw key ${String(seen.body.idempotencyKey)})`,
      );
    } else if (call.tool === 'list_refunds') {
      const refunds = (seen.body.refunds ?? []) as { order?: string }[];
      refundsForOrder = refunds.filter((r) => r.order === options.order).length;
      print(`  step ${step} ${call.tool}: ${refundsForOrder} refund(s) for ${options.order}`);
    } else {
      print(`  step ${step} ${call.tool}: ${seen.status}`);
    }
  }
  return {
    refundId: typeof refund?.body.id === 'string' ? refund.body.id : undefined,
    attempts: refund?.attempts ?? 0,
    replayed: refund?.replayed ?? false,
    refundsForOrder,
  };
}

async function callTool(
  options: AgentLoopOptions,
  step: number,
  call: ToolCall,
): Promise<Observation> {
  const url = `${options.baseUrl}${call.path}`;
  const log = (attempt: number, what: string) =>
    options.print(`  step ${step} ${call.tool}: attempt ${attempt} ${what}; retrying`);
  if (call.method === 'GET') return observe(await fetch(url), 1);
  const init = {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(call.args),
  };
  if (options.keying === 'explicit') {
    const { response, attempts } = await idempotentFetch(url, {
      ...init,
      idempotencyKey: stepKey({ runId: options.runId, step, tool: call.tool }),
      retry: { ...RETRY, attemptTimeoutMs: options.attemptTimeoutMs },
      onRetry: (r) =>
        log(r.attempt, r.reason === 'in-flight' ? 'got 409 (in flight)' : 'timed out'),
    });
    return observe(response, attempts);
  }
  // No key: the same body on every attempt is what makes the proxy's derived key the same.
  for (let attempt = 1; ; attempt++) {
    const response = await fetch(url, {
      ...init,
      signal: AbortSignal.timeout(options.attemptTimeoutMs),
    }).catch((error: unknown) => {
      if ((error as Error).name !== 'TimeoutError' || attempt >= RETRY.maxAttempts) throw error;
      return undefined;
    });
    if (response && (response.status !== 409 || attempt >= RETRY.maxAttempts)) {
      return observe(response, attempt);
    }
    await response?.body?.cancel();
    log(attempt, response ? 'got 409 (in flight)' : 'timed out');
    await new Promise((resolve) => setTimeout(resolve, RETRY.maxDelayMs));
  }
}

async function observe(response: Response, attempts: number): Promise<Observation> {
  const text = await response.text();
  return {
    status: response.status,
    body: (text ? JSON.parse(text) : {}) as Record<string, unknown>,
    attempts,
    replayed: response.headers.get('idempotent-replayed') === 'true',
  };
}

/** The proxy config of this example: one route for both variants; a sent key wins over derivation. */
export function agentLoopProxyYaml(paymentsUrl: string, port: number): string {
  return `listen: { host: 127.0.0.1, port: ${port} }
admin: { port: 0 }
store:
  url: \${DATABASE_URL:-}
  dataDir: \${IDEMPOTENCY_PROXY_DATA_DIR:-.data/demo-postgres}
  table: agent_loop_keys
upstreams:
  payments: { url: ${paymentsUrl}, timeout: 30s }
routes:
  - name: refunds
    match: { method: POST, path: /refunds }
    upstream: payments
    idempotency:
      key: { derive: [body], window: 10m }   # no Idempotency-Key sent: derived from the body
  - name: everything-else
    match: { path: /** }
    upstream: payments
`;
}

async function main(): Promise<number> {
  const payments = await startPaymentsService({ port: await findFreePort() });
  const port = await findFreePort();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'agent-loop-'));
  const configFile = path.join(dir, 'proxy.yaml');
  fs.writeFileSync(configFile, agentLoopProxyYaml(payments.url, port));
  const cleanUp = async () => {
    await payments.close();
    fs.rmSync(dir, { recursive: true, force: true });
  };
  const proxy = await startBuiltProxy({
    configFile,
    readyUrl: `http://127.0.0.1:${port}/health`,
  }).catch(async (error: unknown) => {
    await cleanUp();
    throw error;
  });
  try {
    const common = {
      baseUrl: `http://127.0.0.1:${port}`,
      attemptTimeoutMs: 250,
      serviceDelayMs: 700,
    };
    const print = (line: string) => process.stdout.write(`${line}\n`);
    const runId = `run-${Date.now()}`;
    const explicit = await runAgentLoop({
      ...common,
      keying: 'explicit',
      runId,
      order: `ord_${Date.now()}_a`,
      print,
    });
    print('');
    const derived = await runAgentLoop({
      ...common,
      keying: 'derived',
      runId,
      order: `ord_${Date.now()}_b`,
      print,
    });
    return explicit.refundsForOrder === 1 && derived.refundsForOrder === 1 ? 0 : 1;
  } finally {
    await proxy.close();
    await cleanUp();
  }
}

if (require.main === module) runDemo(main, 'agent loop');
