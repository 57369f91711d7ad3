// Unknown outcomes past reconcile.giveUpAfter (docs/reconcile.md): probing stops, and it shows. One
// warn line per record when it is given up (route, key as logKey says, probes made, age), one
// reconcile_probes_total{result="gave_up"}, a gave_up event in its history, and the record listing
// tells it from one still being probed. Against a ledger upstream whose lookups cannot tell (a 200
// where the rules name 201 and 404), so every probe reaches it and is counted there.
import { createHash } from 'node:crypto';
import { postJson, send, type TestResponse } from '../support/http';
import { startProxy, type TestProxy } from '../support/proxy';
import { startRefundLedger, type RefundLedger } from '../support/refund-ledger';
import { until } from '../support/eventually';
import { sleep } from '../support/upstream';
import { recordFigures } from '../support/run-report';

const ADMIN_TOKEN = 'reconcile-give-up-4b1d';
const UNDECIDED = `
        request: { path: "/refunds?idempotency_key={key}" }
        found: { status: [201] }
        notFound: { status: [404] }
        after: 2s
        giveUpAfter: 4s`;

let ledger: RefundLedger;
let proxy: TestProxy;

beforeAll(async () => {
  ledger = await startRefundLedger();
  // Late past the proxy's timeout, and over before the first probe is due.
  ledger.lateMs = 1_500;
  proxy = await startProxy({
    yaml: `
store: { table: "\${TEST_TABLE}" }
admin: { token: "${ADMIN_TOKEN}" }
upstreams:
  payments: { url: ${ledger.url}, timeout: 300ms }
routes:
  - name: swept
    match: { path: /swept, method: POST }
    upstream: payments
    idempotency:
      logKey: hash
      reconcile:${UNDECIDED}
        every: 200ms
  - name: retried
    match: { path: /retried, method: POST }
    upstream: payments
    idempotency:
      reconcile:${UNDECIDED}
        every: 0
`,
  });
});

afterAll(async () => {
  await proxy?.close();
  await ledger?.close();
});

const refund = (path: string, key: string, mode?: string): Promise<TestResponse> =>
  postJson(`${proxy.url}${path}`, key, { order: key, amount: 10 }, mode ? { 'x-mode': mode } : {});

const gaveUpLines = (key: string) =>
  proxy.logs.filter(
    (line) => String(line.msg).startsWith('reconcile: gave up') && line.key === key,
  );

async function listed(key: string): Promise<{ reconcile: string | null } | undefined> {
  const listing = await send(`${proxy.adminUrl}/api/records?state=unknown`, {
    method: 'GET',
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
  });
  return listing
    .json<{ records: { key: string; reconcile: string | null }[] }>()
    .records.find((record) => record.key === key);
}

async function gaveUpCount(route: string): Promise<number> {
  const text = await proxy.metrics.registry.getSingleMetricAsString(
    'idempotency_proxy_reconcile_probes_total',
  );
  const line = text
    .split('\n')
    .find((l) => l.includes(`route="${route}"`) && l.includes('result="gave_up"'));
  return line === undefined ? 0 : Number(line.split(' ').at(-1));
}

/** Sleeps until the record is `ms` old by the database's clock (the upstream's timeout is coarse). */
async function untilAge(key: string, ms: number): Promise<void> {
  const { rows } = await proxy.pool.query<{ left_ms: number }>(
    `SELECT extract(epoch FROM (created_at - now())) * 1000 + $2::float8 AS left_ms
     FROM "${proxy.table}" WHERE key = $1`,
    [key, ms],
  );
  await sleep(Math.max(0, rows[0]!.left_ms));
}

async function historyOf(key: string): Promise<{ event: string; probes?: number }[]> {
  const { rows } = await proxy.pool.query<{ events: { event: string; probes?: number }[] }>(
    `SELECT events FROM "${proxy.table}" WHERE key = $1`,
    [key],
  );
  return rows[0]!.events;
}

test('the sweep gives a record up once: one line with the hashed key, probes and age; one count; listed as given up', async () => {
  const key = 'swept-give-up-1';
  const first = await refund('/swept', key, 'answer-late');
  expect(first.headers['idempotency-outcome']).toBe('unknown');
  // Still being probed: the listing says so, and the sweep asks the ledger.
  expect((await listed(key))?.reconcile).toBe('probing');
  await until(() => ledger.probes(key) >= 1, 'the first probe', { timeoutMs: 5_000 });

  const hashed = `sha256:${createHash('sha256').update(key).digest('hex').slice(0, 16)}`;
  const [line] = await until(
    () => (gaveUpLines(hashed).length > 0 ? gaveUpLines(hashed) : undefined),
    'the give-up line',
    { timeoutMs: 10_000 },
  );
  const probesAtGiveUp = ledger.probes(key);
  expect(line).toMatchObject({ level: 40, route: 'swept', probes: probesAtGiveUp });
  expect(line!.ageMs).toBeGreaterThanOrEqual(4_000);
  expect(gaveUpLines(key)).toHaveLength(0); // logKey: hash, never the key itself
  expect((await listed(key))?.reconcile).toBe('given_up');
  expect(await historyOf(key)).toContainEqual(
    expect.objectContaining({ event: 'gave_up', probes: probesAtGiveUp }),
  );

  // More sweep rounds (every 200ms): no probe, no second line, no second count.
  await sleep(800);
  expect(ledger.probes(key)).toBe(probesAtGiveUp);
  expect(gaveUpLines(hashed)).toHaveLength(1);
  expect(await gaveUpCount('swept')).toBe(1);
  // A retry still gets the unknown outcome, now without a Retry-After: no probe will tell.
  const retry = await refund('/swept', key);
  expect(retry.headers['idempotency-outcome']).toBe('unknown');
  expect(retry.headers['retry-after']).toBeUndefined();
  expect(ledger.executions(key)).toBe(1);
  recordFigures(__filename, 'given up by the sweep', {
    executions: ledger.executions(key),
    probes: probesAtGiveUp,
    giveUpLines: gaveUpLines(hashed).length,
  });
});

test('on a route probed only by retries, the first retry past giveUpAfter gives it up, once', async () => {
  const key = 'retried-give-up-1';
  expect((await refund('/retried', key, 'answer-late')).headers['idempotency-outcome']).toBe(
    'unknown',
  );
  await untilAge(key, 2_100); // past after
  const probed = await refund('/retried', key); // due: probes, and the ledger cannot tell
  expect(probed.headers['idempotency-outcome']).toBe('unknown');
  expect(ledger.probes(key)).toBe(1);
  expect((await listed(key))?.reconcile).toBe('probing');
  expect(gaveUpLines(key)).toHaveLength(0);

  await untilAge(key, 4_100); // past giveUpAfter
  const [late, later] = [await refund('/retried', key), await refund('/retried', key)];
  for (const answer of [late, later]) {
    expect(answer.headers['idempotency-outcome']).toBe('unknown');
    expect(answer.headers['retry-after']).toBeUndefined();
  }
  expect(ledger.probes(key)).toBe(1);
  const lines = gaveUpLines(key);
  expect(lines).toHaveLength(1);
  expect(lines[0]).toMatchObject({ route: 'retried', key, probes: 1 });
  expect(await gaveUpCount('retried')).toBe(1);
  expect((await listed(key))?.reconcile).toBe('given_up');
  expect(ledger.executions(key)).toBe(1);
});
