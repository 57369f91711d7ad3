// An agent-like loop calls the bundled, non-idempotent payments service through the proxy with a
// client timeout shorter than the service takes. Whether it sends explicit keys (client helper) or
// none at all (derived by the proxy), the run ends with exactly one refund.
import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { agentLoopProxyYaml, runAgentLoop } from '../../src/demo/agent-loop';
import { findFreePort } from '../../src/embedded/embedded';
import { type PaymentsService, startPaymentsService } from '../../src/demo/payments-service';
import { databaseUrl, startProxy, type TestProxy } from '../support/proxy';
import { recordFigures } from '../support/run-report';

let payments: PaymentsService;
let proxy: TestProxy;

beforeAll(async () => {
  payments = await startPaymentsService({ port: await findFreePort() });
  proxy = await startProxy({
    yaml: agentLoopProxyYaml(payments.url, 0).replace(
      'table: agent_loop_keys',
      'table: ${TEST_TABLE}',
    ),
  });
});

afterAll(async () => {
  await proxy?.close();
  await payments?.close();
});

const common = { attemptTimeoutMs: 250, serviceDelayMs: 700 };

test.each(['explicit', 'derived'] as const)(
  'with %s keys, a refund call that times out is retried and refunds exactly once',
  async (keying) => {
    const lines: string[] = [];
    const order = `ord_${keying}`;
    const result = await runAgentLoop({
      ...common,
      baseUrl: proxy.url,
      keying,
      runId: 'run-4021',
      order,
      print: (line) => lines.push(line),
    });
    expect(result.refundsForOrder).toBe(1);
    expect(result.attempts).toBeGreaterThanOrEqual(2); // the first attempt timed out
    expect(result.replayed).toBe(true);
    const created = payments.refunds.filter((r) => r.order === order);
    expect(created).toHaveLength(1);
    expect(result.refundId).toBe(created[0]!.id);
    expect(created[0]!.idempotencyKey).toMatch(
      keying === 'explicit' ? /^[0-9a-f]{8}-[0-9a-f]{4}-5/ : /^derived:[A-Za-z0-9_-]{43}$/,
    );
    expect(lines.join('\n')).toContain('attempt 1 timed out; retrying');
    expect(lines.join('\n')).toContain(`1 refund(s) for ${order}`);
  },
);

test('the same loop straight to the payments service refunds once per attempt, and still gets no answer', async () => {
  const order = 'ord_direct';
  await expect(
    runAgentLoop({
      ...common,
      baseUrl: payments.url,
      keying: 'derived',
      runId: 'run-direct',
      order,
      print: () => undefined,
    }),
  ).rejects.toMatchObject({ name: 'TimeoutError' });
  await new Promise((resolve) => setTimeout(resolve, common.serviceDelayMs)); // let the last one land
  expect(payments.refunds.filter((r) => r.order === order)).toHaveLength(6); // one per attempt
});

test('node dist/demo/agent-loop.js runs both variants against the built proxy and exits 0', async () => {
  const script = path.resolve(__dirname, '../../dist/demo/agent-loop.js');
  const { stdout } = await promisify(execFile)(process.execPath, [script], {
    env: { ...process.env, DATABASE_URL: databaseUrl() },
    timeout: 60_000,
  });
  expect(stdout).toContain('(explicit keys):');
  expect(stdout).toContain('(derived keys):');
  expect(stdout.match(/: 1 refund\(s\) for /g)).toHaveLength(2);
  recordFigures(__filename, 'story', stdout.split('\n'));
}, 90_000);
