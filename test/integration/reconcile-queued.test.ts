// An unknown outcome whose own completion could not be stored at once (its statement's connection
// cut, again and again, until the client's answer had waited store.outbox.holdAnswer): the outbox
// stores it later, and keeps the original body with it as a completion stored at once does
// (docs/reconcile.md, "What is kept"), so a probe whose path names a body field resolves it.
import { randomBytes } from 'node:crypto';
import { until } from '../support/eventually';
import { postJson } from '../support/http';
import { databaseUrl, startProxy, type TestProxy } from '../support/proxy';
import { startRefundLedger, type RefundLedger } from '../support/refund-ledger';
import { startReplyCutter, type ReplyCutter } from '../support/reply-cutter';
import { recordFigures } from '../support/run-report';

let cutter: ReplyCutter;
let ledger: RefundLedger;
let proxy: TestProxy;

beforeAll(async () => {
  cutter = await startReplyCutter(databaseUrl());
  ledger = await startRefundLedger();
  ledger.lateMs = 1_500; // past the proxy's timeout; short, so nothing is left running at the end
  proxy = await startProxy({
    databaseUrl: cutter.url,
    yaml: `
store: { table: "\${TEST_TABLE}", outbox: { holdAnswer: 200ms } }
upstreams:
  payments: { url: ${ledger.url}, timeout: 300ms }
routes:
  - name: refunds
    match: { path: /refunds, method: POST }
    upstream: payments
    idempotency:
      reconcile:
        request: { path: "/refunds?idempotency_key={key}&order={body:/order}" }
        found: { status: [200], exists: /0 }
        answer: { status: 201, body: /0 }
        after: 1s
        every: 0
`,
  });
});

afterAll(async () => {
  await proxy?.close();
  await ledger?.close();
  await cutter?.close();
});

async function recordOf(key: string) {
  const { rows } = await proxy.pool.query<{
    outcome_unknown: boolean;
    reconcile_body: Buffer | null;
    probes: number;
    probe_after: Date | null;
  }>(
    `SELECT outcome_unknown, reconcile_body, probes, probe_after FROM "${proxy.table}" WHERE key = $1`,
    [key],
  );
  return rows[0];
}

test('a queued unknown outcome keeps its body, and a body-templated probe resolves it', async () => {
  const key = `queued-${randomBytes(4).toString('hex')}`;
  const body = { order: 'ord_queued', amount: 700 };
  const answer = postJson(`${proxy.url}/refunds`, key, body, { 'x-mode': 'answer-late' });
  await until(() => ledger.executions(key) === 1, 'the refund to run upstream');
  // Every statement carrying the key is cut before PostgreSQL sees it until the client has its
  // answer: the unknown outcome's completion cannot land within holdAnswer, so it is queued.
  let answered = false;
  let cuts = 0;
  const cutAgain = (): void => {
    if (answered) return;
    void cutter.cutOn(key, 'before').then(() => {
      cuts++;
      cutAgain();
    });
  };
  cutAgain();
  const first = await answer;
  answered = true;
  cutter.disarm();
  expect(first.status).toBe(504);
  expect(first.headers['idempotency-outcome']).toBe('unknown');
  expect(Number(first.headers['retry-after'])).toBeGreaterThanOrEqual(1);
  expect(cuts).toBeGreaterThanOrEqual(1);
  const logged = await until(
    () => proxy.logs.find((line) => line.msg === 'request' && line.key === key),
    'the request log line',
  );
  expect(logged).toMatchObject({ landing: 'queued' });

  // Landed later by the outbox, with the body, as if stored at once.
  const kept = await until(async () => {
    const row = await recordOf(key);
    return row?.reconcile_body ? row : undefined;
  }, 'the queued completion to land with its body');
  expect(kept.outcome_unknown).toBe(true);
  expect(JSON.parse(kept.reconcile_body!.toString('utf8'))).toEqual(body);
  expect(kept.probes).toBe(0);
  expect(kept.probe_after).not.toBeNull();

  const resolved = await until(
    async () => {
      const retry = await postJson(`${proxy.url}/refunds`, key, body);
      return retry.headers['idempotency-outcome'] === 'unknown' ? undefined : retry;
    },
    `${key} to be reconciled`,
    { timeoutMs: 15_000, intervalMs: 250 },
  );
  expect(resolved.status).toBe(201);
  expect(resolved.headers['idempotency-outcome']).toBe('reconciled');
  expect(resolved.json()).toMatchObject({ key, order: 'ord_queued', amount: 700 });
  expect(ledger.executions(key)).toBe(1);
  const lookups = ledger.lookups.filter((query) => query.get('idempotency_key') === key);
  expect(lookups.map((query) => query.get('order'))).toEqual(['ord_queued']);
  recordFigures(__filename, 'queued unknown outcome', {
    completionCuts: cuts,
    executions: ledger.executions(key),
    probes: lookups.length,
    agentGot: `${resolved.status} reconciled`,
  });
});
