// Unknown outcomes resolved with the upstream (docs/reconcile.md), against a payments upstream that
// keeps its own ledger (support/refund-ledger.ts) and real PostgreSQL. In every scenario the
// upstream runs a key at most once, and the agent gets the real result whenever the upstream can
// tell. The counts each scenario ends with go to the run report.
import { postJson, send, type TestResponse } from '../support/http';
import { startProxy, uniqueTable, type TestProxy } from '../support/proxy';
import { startRefundLedger, type RefundLedger } from '../support/refund-ledger';
import { eventually, until } from '../support/eventually';
import { sleep } from '../support/upstream';
import { recordFigures } from '../support/run-report';
import pino from 'pino';
import { PostgresKeyStore } from '../../src/store/postgres/key-store';
import { ReconcileStore } from '../../src/store/postgres/reconcile-store';
import { Reconciler } from '../../src/reconcile/reconciler';
import { sweepOnce } from '../../src/reconcile/sweeper';

let ledger: RefundLedger;
let proxy: TestProxy;
const figures: Record<string, unknown> = {};

const ROUTE = (name: string, path: string, reconcile: string) => `
  - name: ${name}
    match: { path: ${path}, method: POST }
    upstream: payments
    idempotency:
      reconcile:
${reconcile
  .trim()
  .split('\n')
  .map((line) => `        ${line.trim()}`)
  .join('\n')}`;

const LOOKUP = `
request: { path: "/refunds?idempotency_key={key}&order={body:/order}" }
found: { status: [200], exists: /0 }
answer: { status: 201, body: /0 }`;

const ROUTES = [
  ROUTE('refunds', '/refunds', `${LOOKUP}\nafter: 1s\nevery: 0`),
  ROUTE('guarded', '/guarded', `${LOOKUP}\nafter: 6s\nevery: 0`),
  ROUTE('swept', '/swept', `${LOOKUP}\nafter: 1s\nevery: 200ms`),
  ROUTE('pair', '/pair', `${LOOKUP}\nafter: 1s\nevery: 100ms`).replace(
    'upstream: payments',
    'upstream: patient',
  ),
  ROUTE('crashed', '/crashed', `${LOOKUP}\nafter: 1s\nevery: 0`).replace(
    '      reconcile:',
    '      lockTimeout: 500ms\n      reconcile:',
  ),
  ROUTE(
    'needs-field',
    '/needs-field',
    `request: { path: "/refunds?idempotency_key={key}&customer={body:/customer}" }
found: { status: [200], exists: /0 }
after: 1s
every: 0`,
  ),
].join('');

const ADMIN_TOKEN = 'reconcile-console-7c2e';

function yaml(ledgerUrl: string): string {
  return `
store: { table: "\${TEST_TABLE}" }
admin: { token: "${ADMIN_TOKEN}" }
upstreams:
  payments: { url: ${ledgerUrl}, timeout: 300ms }
  patient: { url: ${ledgerUrl}, timeout: 1s }
routes:${ROUTES}
`;
}

beforeAll(async () => {
  ledger = await startRefundLedger();
  proxy = await startProxy({ yaml: yaml(ledger.url) });
});

afterAll(async () => {
  await proxy?.close();
  await ledger?.close();
  recordFigures(__filename, 'upstream executions and answers per scenario', figures);
});

afterEach(() => {
  ledger.probeMode = 'normal';
});

const REFUND = { order: 'ord_1', amount: 1200 };

function refund(
  key: string,
  mode?: string,
  path = '/refunds',
  target: TestProxy = proxy,
  body: unknown = REFUND,
): Promise<TestResponse> {
  return postJson(`${target.url}${path}`, key, body, mode ? { 'x-mode': mode } : {});
}

function expectUnknown(response: TestResponse): void {
  expect([502, 504]).toContain(response.status);
  expect(response.headers['idempotency-outcome']).toBe('unknown');
  expect(Number(response.headers['retry-after'])).toBeGreaterThanOrEqual(1);
}

/** Retries until the answer is no longer the unknown outcome (each retry may trigger the probe). */
async function retryUntilKnown(
  key: string,
  path = '/refunds',
  target = proxy,
): Promise<TestResponse> {
  return until(
    async () => {
      const response = await refund(key, undefined, path, target);
      return response.headers['idempotency-outcome'] === 'unknown' ? undefined : response;
    },
    `${key} to be reconciled`,
    { timeoutMs: 15_000, intervalMs: 250 },
  );
}

/** What the ledger holds for `key`, as the scenario table in the report shows it. */
function note(scenario: string, key: string, got: TestResponse): void {
  figures[scenario] = {
    executions: ledger.executions(key),
    probes: ledger.probes(key),
    agentGot: `${got.status} ${String(got.headers['idempotency-outcome'] ?? '')}`.trim(),
  };
}

async function record(key: string, target = proxy) {
  const { rows } = await target.pool.query<{
    state: string;
    outcome_unknown: boolean;
    status: number;
    probes: number;
    reconcile_body: Buffer | null;
  }>(
    `SELECT state, outcome_unknown, status, probes, reconcile_body FROM "${target.table}" WHERE key = $1`,
    [key],
  );
  return rows[0];
}

describe('a retry after an unknown outcome asks the upstream', () => {
  it('found: the refund ran before the timeout; the retry gets the real refund, marked reconciled, and it is replayed', async () => {
    const first = await refund('found-1', 'answer-late');
    expectUnknown(first);
    expect(first.json<{ detail: string }>().detail).toMatch(/asks the upstream/);
    const reconciled = await retryUntilKnown('found-1');
    expect(reconciled.status).toBe(201);
    expect(reconciled.headers['idempotency-outcome']).toBe('reconciled');
    const made = ledger.refunds.find((r) => r.key === 'found-1')!;
    expect(reconciled.json()).toEqual(made);
    const again = await refund('found-1');
    expect(again.status).toBe(201);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.headers['idempotency-outcome']).toBe('reconciled');
    expect(again.json()).toEqual(made);
    expect(ledger.executions('found-1')).toBe(1);
    // The probe asked with the key as forwarded and the original body's order.
    const lookup = ledger.lookups.find((q) => q.get('idempotency_key') === 'found-1')!;
    expect(lookup.get('order')).toBe('ord_1');
    expect(ledger.probes('found-1')).toBe(1);
    expect((await record('found-1'))!.reconcile_body).toBeNull();
    // The console's listing of reconciled records has it, with the upstream's status.
    const listing = await send(`${proxy.adminUrl}/api/records?state=reconciled`, {
      method: 'GET',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    });
    expect(listing.json<{ records: unknown[] }>().records).toContainEqual(
      expect.objectContaining({
        key: 'found-1',
        route: 'refunds',
        status: 201,
        outcomeUnknown: false,
      }),
    );
    const log = proxy.logs.find((line) => line.reconcile === 'found');
    expect(log).toMatchObject({ route: 'refunds', outcome: 'replayed' });
    note('found', 'found-1', reconciled);
  });

  it('not found: the request never ran; the claim is released and the retry is forwarded once, with the same key', async () => {
    const first = await refund('lost-1', 'drop');
    expectUnknown(first);
    expect(ledger.executions('lost-1')).toBe(0);
    const retried = await retryUntilKnown('lost-1');
    expect(retried.status).toBe(201);
    expect(retried.headers['idempotency-outcome']).toBeUndefined();
    expect(ledger.executions('lost-1')).toBe(1);
    expect(retried.json()).toEqual(ledger.refunds.find((r) => r.key === 'lost-1'));
    const again = await refund('lost-1');
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(ledger.executions('lost-1')).toBe(1);
    expect(proxy.logs.find((line) => line.reconcile === 'not_found')).toMatchObject({
      outcome: 'executed',
    });
    note('not found', 'lost-1', retried);
  });

  it('ambiguous (5xx) and unreadable (non-JSON, slow) probes leave the outcome unknown with Retry-After, then a good probe resolves it', async () => {
    const first = await refund('amb-1', 'answer-late');
    expectUnknown(first);
    await sleep(1_100); // `after`
    for (const mode of ['error', 'html', 'slow'] as const) {
      ledger.probeMode = mode;
      const before = ledger.probes('amb-1');
      // The probe is due again only after its hold: retry until this mode's probe was made.
      const answer = await until(
        async () => {
          const response = await refund('amb-1');
          expectUnknown(response);
          return ledger.probes('amb-1') > before && response;
        },
        `a ${mode} probe`,
        { timeoutMs: 20_000, intervalMs: 300 },
      );
      expectUnknown(answer);
      expect((await record('amb-1'))!.outcome_unknown).toBe(true);
    }
    const reasons = proxy.logs
      .filter((line) => String(line.msg).startsWith('reconcile:') && line.key === 'amb-1')
      .map((line) => String(line.reason));
    expect(reasons).toEqual([
      expect.stringMatching(/answered 500/),
      expect.stringMatching(/not JSON/),
      expect.stringMatching(/timeout|Timeout/i),
    ]);
    ledger.probeMode = 'normal';
    const resolved = await retryUntilKnown('amb-1');
    expect(resolved.status).toBe(201);
    expect(resolved.headers['idempotency-outcome']).toBe('reconciled');
    expect(ledger.executions('amb-1')).toBe(1);
    note('ambiguous, then found', 'amb-1', resolved);
  }, 60_000);

  it('a template naming a field the body lacks leaves the record unknown, never released, and logs why', async () => {
    expectUnknown(await refund('field-1', 'answer-late', '/needs-field'));
    await sleep(1_100);
    const answer = await refund('field-1', undefined, '/needs-field');
    expectUnknown(answer);
    expect(await record('field-1')).toMatchObject({ outcome_unknown: true, state: 'completed' });
    expect(ledger.probes('field-1')).toBe(0);
    expect(
      proxy.logs.find((line) => line.key === 'field-1' && line.reason !== undefined)?.reason,
    ).toMatch(/has no \/customer/);
    expect(ledger.executions('field-1')).toBe(1);
    note('probe cannot be written', 'field-1', answer);
  });

  it('a retry before `after` does not probe: a slow original still running is never read as not found', async () => {
    const first = await refund('slow-1', 'record-late', '/guarded');
    expectUnknown(first);
    expect(Number(first.headers['retry-after'])).toBeGreaterThan(1);
    // Retries while the original is still running upstream (it records at lateMs): no probe yet.
    const early = await refund('slow-1', undefined, '/guarded');
    expectUnknown(early);
    expect(ledger.probes('slow-1')).toBe(0);
    await until(() => ledger.executions('slow-1') === 1, 'the slow original to run');
    const resolved = await retryUntilKnown('slow-1', '/guarded');
    expect(resolved.status).toBe(201);
    expect(resolved.headers['idempotency-outcome']).toBe('reconciled');
    expect(ledger.executions('slow-1')).toBe(1);
    note('probe racing a slow original', 'slow-1', resolved);
  }, 30_000);
});

describe('a holder that died mid-request', () => {
  it('its lease ends; the retry settles the unknown outcome, keeps the body, and the probe finds the refund', async () => {
    // A proxy claimed the key, sent the refund (the ledger made it) and died before storing it.
    const { computeFingerprint } = await import('../../src/idempotency/fingerprint');
    const route = proxy.config.routes.find((r) => r.name === 'crashed')!;
    const body = JSON.stringify(REFUND);
    const fingerprint = computeFingerprint(
      {
        method: 'POST',
        path: '/crashed',
        query: '',
        headers: {},
        body: Buffer.from(body),
        contentType: 'application/json',
      },
      route.idempotency!.fingerprint,
    );
    const claim = await new PostgresKeyStore(proxy.pool, proxy.table).claim({
      id: { scope: 'crashed', tenant: '', key: 'crash-1' },
      route: 'crashed',
      fingerprint,
      leaseMs: 500,
      claimExpiryMs: 60_000,
    });
    expect(claim.kind).toBe('claimed');
    ledger.refunds.push({ id: 're_dead', key: 'crash-1', order: 'ord_1', amount: 1200 });
    await sleep(600); // the lease
    const settled = await refund('crash-1', undefined, '/crashed');
    expectUnknown(settled);
    expect((await record('crash-1'))!.reconcile_body?.toString()).toBe(body);
    const resolved = await retryUntilKnown('crash-1', '/crashed');
    expect(resolved.status).toBe(201);
    expect(resolved.headers['idempotency-outcome']).toBe('reconciled');
    expect(resolved.json()).toEqual({
      id: 're_dead',
      key: 'crash-1',
      order: 'ord_1',
      amount: 1200,
    });
    expect(ledger.executions('crash-1')).toBe(1);
    note('holder died mid-request', 'crash-1', resolved);
  });
});

describe('the sweep', () => {
  it('resolves an unknown outcome with no retry; the next request replays the real refund', async () => {
    expectUnknown(await refund('swept-1', 'answer-late', '/swept'));
    await eventually(async () => expect((await record('swept-1'))!.outcome_unknown).toBe(false), {
      timeoutMs: 10_000,
    });
    expect(ledger.probes('swept-1')).toBe(1);
    const answer = await refund('swept-1', undefined, '/swept');
    expect(answer.status).toBe(201);
    expect(answer.headers['idempotency-outcome']).toBe('reconciled');
    expect(answer.headers['idempotent-replayed']).toBe('true');
    expect(ledger.executions('swept-1')).toBe(1);
    note('sweeper, no retry', 'swept-1', answer);
  });

  it('one sweep now (the CLI’s `reconcile --route R`) resolves a route that only probes on retries', async () => {
    expectUnknown(await refund('cli-1', 'answer-late'));
    await sleep(1_100); // `after`
    const reconciler = new Reconciler(
      new ReconcileStore(proxy.pool, proxy.table),
      pino({ level: 'silent' }),
    );
    const result = await sweepOnce(reconciler, proxy.config, 'refunds');
    expect(result).toMatchObject({ found: 1, notFound: 0, unknown: 0, skipped: 0 });
    expect((await record('cli-1'))!.outcome_unknown).toBe(false);
    const answer = await refund('cli-1');
    expect(answer.headers['idempotency-outcome']).toBe('reconciled');
    expect(ledger.executions('cli-1')).toBe(1);
    note('one sweep now (CLI)', 'cli-1', answer);
  });

  it('two instances sweeping at once probe each record once', async () => {
    ledger.probeMode = 'slow-found';
    const second = await startProxy({ yaml: yaml(ledger.url), table: proxy.table });
    try {
      const keys = ['pair-1', 'pair-2', 'pair-3', 'pair-4'];
      await Promise.all(
        keys.map(async (key, i) =>
          expectUnknown(await refund(key, 'drop', '/pair', i % 2 ? second : proxy)),
        ),
      );
      for (const key of keys)
        await eventually(async () => expect(await record(key)).toBeUndefined(), {
          timeoutMs: 15_000,
        });
      // Both sweep every 100 ms and each probe takes 400 ms: without the per-record probe token
      // both would probe every record, several times. Each answered not found (the refunds were
      // dropped before they ran): the records are released, and nothing ran.
      expect(keys.map((key) => ledger.probes(key))).toEqual([1, 1, 1, 1]);
      expect(keys.map((key) => ledger.executions(key))).toEqual([0, 0, 0, 0]);
      const answer = await refund('pair-1', undefined, '/pair', second);
      expect(answer.status).toBe(201);
      expect(ledger.executions('pair-1')).toBe(1);
      note('two instances sweeping (not found)', 'pair-1', answer);
    } finally {
      await second.close();
    }
  }, 40_000);

  it('a restart between the unknown outcome and the probe: another instance resolves it on the retry', async () => {
    const table = uniqueTable();
    const before = await startProxy({ yaml: yaml(ledger.url), table });
    expectUnknown(await refund('restart-1', 'answer-late', '/refunds', before));
    await before.close();
    const after = await startProxy({ yaml: yaml(ledger.url), table });
    try {
      const resolved = await retryUntilKnown('restart-1', '/refunds', after);
      expect(resolved.status).toBe(201);
      expect(resolved.headers['idempotency-outcome']).toBe('reconciled');
      expect(ledger.executions('restart-1')).toBe(1);
      const probes = await after.metrics.registry.getSingleMetricAsString(
        'idempotency_proxy_reconcile_probes_total',
      );
      expect(probes).toMatch(/result="found"\} 1/);
      note('restart before the probe', 'restart-1', resolved);
    } finally {
      await after.close();
    }
  });
});
