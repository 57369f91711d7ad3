// The shipped config/proxy.yaml in front of the bundled demo payments service tells the README's
// story: a retried refund runs once through the proxy, and once per attempt without it.
import fs from 'node:fs';
import path from 'node:path';
import { findFreePort } from '../../src/embedded/embedded';
import { type PaymentsService, startPaymentsService } from '../../src/demo/payments-service';
import { tellRefundStory } from '../../src/demo/refund-story';
import { tellReconcileStory, writeReconcileConfig } from '../../src/demo/reconcile-story';
import { postJson, send } from '../support/http';
import { startProxy, type TestProxy } from '../support/proxy';

let payments: PaymentsService;
let proxy: TestProxy;

beforeAll(async () => {
  payments = await startPaymentsService({ port: await findFreePort() });
  proxy = await startProxy({
    yaml: fs.readFileSync(path.join(__dirname, '../../config/proxy.yaml'), 'utf8'),
    env: { PAYMENTS_URL: payments.url },
  });
});

afterAll(async () => {
  await proxy?.close();
  await payments.close();
});

test('the default config protects POST /refunds and passes GET /refunds through', async () => {
  const created = await postJson(`${proxy.url}/refunds`, 'readme-1', { order: 'ord_1', amount: 5 });
  expect(created.status).toBe(201);
  const replayed = await postJson(`${proxy.url}/refunds`, 'readme-1', {
    order: 'ord_1',
    amount: 5,
  });
  expect(replayed.headers['idempotent-replayed']).toBe('true');
  expect(replayed.body.equals(created.body)).toBe(true);
  const missing = await postJson(`${proxy.url}/refunds`, undefined, { order: 'ord_1', amount: 5 });
  expect(missing.status).toBe(400);
  const list = await send(`${proxy.url}/refunds`, { method: 'GET' });
  expect(list.json()).toMatchObject({ count: 1 });
  expect(payments.refunds).toHaveLength(1);
  expect(payments.refunds[0]!.idempotencyKey).toBe('readme-1');
});

test('three attempts of a timed-out refund make one refund through the proxy, three without it', async () => {
  const lines: string[] = [];
  const result = await tellRefundStory({
    proxyUrl: proxy.url,
    paymentsUrl: payments.url,
    clientTimeoutMs: 200,
    serviceDelayMs: 700,
    print: (line) => lines.push(line),
  });
  expect(result.attempts.map((a) => [a.status, a.replayed])).toEqual([
    ['timeout', false],
    [409, false],
    [201, true],
  ]);
  expect(result.attempts[2]!.refundId).toMatch(/^re_/);
  expect(result.refundsThroughProxy).toBe(1);
  expect(result.refundsWithoutProxy).toBe(3);
  expect(lines.join('\n')).toContain('3 attempts, 1 refund created');
});

test('the demo’s second act: the service times out after refunding, the retry gets the real refund, one refund in all', async () => {
  const configFile = writeReconcileConfig(path.join(__dirname, '../../config/proxy.yaml'));
  const reconciling = await startProxy({
    yaml: fs.readFileSync(configFile, 'utf8'),
    env: { PAYMENTS_URL: payments.url },
  });
  try {
    const lines: string[] = [];
    const result = await tellReconcileStory({
      proxyUrl: reconciling.url,
      paymentsUrl: payments.url,
      print: (line) => lines.push(line),
    });
    expect(result).toMatchObject({
      firstStatus: 504,
      firstOutcome: 'unknown',
      finalStatus: 201,
      finalOutcome: 'reconciled',
      refundsForKey: 1,
    });
    expect(payments.refunds.find((r) => r.id === result.refundId)).toBeDefined();
    expect(lines.at(-1)).toMatch(/1 refund created/);
  } finally {
    await reconciling.close();
    fs.rmSync(path.dirname(configFile), { recursive: true, force: true });
  }
}, 30_000);
