// Postgres goes away mid-test: protected routes fail closed (503, nothing forwarded), pass-through
// routes keep working, and when Postgres is back the proxy recovers without a restart.
import { eventually } from '../support/eventually';
import { postJson, send } from '../support/http';
import { createDisposablePostgres, type DisposablePostgres } from '../support/disposable-postgres';
import { startProxy, type TestProxy } from '../support/proxy';
import { sleep, startUpstream, type TestUpstream } from '../support/upstream';

let database: DisposablePostgres;
let upstream: TestUpstream;
let proxy: TestProxy;

beforeAll(async () => {
  database = await createDisposablePostgres();
  await database.start();
  upstream = await startUpstream();
  proxy = await startProxy({
    databaseUrl: database.url,
    yaml: `
store: { table: "\${TEST_TABLE}" }
upstreams: { api: { url: ${upstream.url} } }
routes:
  - { name: payments, match: { method: POST, path: /payments }, upstream: api, idempotency: {} }
  - { name: rest, match: { path: /** }, upstream: api }
`,
  });
}, 120_000);

afterAll(async () => {
  await proxy?.close();
  await upstream?.close();
  await database?.dispose();
});

test('answers 503 and forwards nothing while Postgres is down, then recovers on its own', async () => {
  const ok = await postJson(`${proxy.url}/payments`, 'before-outage', { a: 1 });
  expect(ok.status).toBe(201);
  const executionsBefore = upstream.executions().length;

  await database.stop();
  const notReady = await send(`${proxy.adminUrl}/readyz`, { method: 'GET' });
  expect(notReady.status).toBe(503);
  expect(notReady.json()).toMatchObject({
    status: 'not ready',
    checks: { store: expect.stringContaining('PostgreSQL not reachable') },
  });
  for (const key of ['during-1', 'during-2', 'before-outage']) {
    const res = await postJson(`${proxy.url}/payments`, key, { a: 1 });
    expect(res.status).toBe(503);
    expect(res.headers['content-type']).toBe('application/problem+json');
    expect(Number(res.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    expect(res.json()).toMatchObject({ code: 'STORE_UNAVAILABLE', key, route: 'payments' });
  }
  expect(upstream.executions()).toHaveLength(executionsBefore);

  const passthrough = await send(`${proxy.url}/anything`, { method: 'GET' });
  expect(passthrough.status).toBe(201);

  await database.start();
  await eventually(
    async () => {
      const recovered = await postJson(`${proxy.url}/payments`, 'after-outage', { a: 1 });
      expect(recovered.status).toBe(201);
    },
    { intervalMs: 250 },
  );
  expect((await send(`${proxy.adminUrl}/readyz`, { method: 'GET' })).status).toBe(200);
  const replay = await postJson(`${proxy.url}/payments`, 'before-outage', { a: 1 });
  expect(replay.headers['idempotent-replayed']).toBe('true');
  expect(upstream.executions()).toHaveLength(executionsBefore + 1);
}, 120_000);

test('under a steady stream with a restart in the middle: nothing runs without a claim, nothing runs twice', async () => {
  upstream.received.length = 0;
  const seen = new Map<string, { statuses: number[]; bodies: Set<string> }>();
  let stop = false;
  const client = async (worker: number): Promise<void> => {
    for (let i = 0; !stop; i++) {
      // Each key is sent twice in a row, the way a client retries, and revisited later.
      const key = `stream-${worker}-${i % 40}`;
      for (let attempt = 0; attempt < 2; attempt++) {
        const res = await postJson(`${proxy.url}/payments`, key, { key }).catch(() => undefined);
        if (!res) continue;
        const entry = seen.get(key) ?? { statuses: [], bodies: new Set<string>() };
        entry.statuses.push(res.status);
        if (res.status === 201) entry.bodies.add(res.text());
        seen.set(key, entry);
      }
      await sleep(5);
    }
  };
  const workers = Array.from({ length: 4 }, (_, w) => client(w));
  await sleep(500); // traffic under way before the outage
  await database.stop();
  await sleep(1_000); // the outage
  await database.start();
  const restartedAt = Date.now();
  const recoveredAfterMs = await eventually(
    async () => {
      const probe = await postJson(`${proxy.url}/payments`, `probe-${Date.now()}`, {});
      expect(probe.status).toBe(201);
      return Date.now() - restartedAt;
    },
    { timeoutMs: 10_000, intervalMs: 50 },
  ).catch(() => undefined);
  await sleep(500); // traffic keeps running a while after recovery
  stop = true;
  await Promise.all(workers);

  expect(recoveredAfterMs).toBeDefined();
  const executions = upstream.executions().filter((r) => !r.body.toString().includes('probe'));
  const executedKeys = executions.map((r) => String(r.headers['idempotency-key']));
  expect(executedKeys.length).toBe(new Set(executedKeys).size); // nothing executed twice
  // Every execution had a claim: its record is in the table (completed, or in progress if PostgreSQL
  // went away between the claim and the completion).
  const { rows } = await proxy.pool.query<{ key: string }>(
    `SELECT key FROM ${proxy.table} WHERE key = ANY($1::text[])`,
    [executedKeys],
  );
  expect(new Set(rows.map((r) => r.key))).toEqual(new Set(executedKeys));
  for (const [key, entry] of seen) {
    expect(entry.bodies.size).toBeLessThanOrEqual(1); // every 201 for a key is the same answer
    expect(entry.statuses.every((s) => [201, 409, 503].includes(s))).toBe(true);
    if (entry.statuses.includes(201)) expect(executedKeys).toContain(key);
  }
  expect([...seen.values()].some((e) => e.statuses.includes(503))).toBe(true);
}, 120_000);
