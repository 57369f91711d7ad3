// Postgres goes away mid-test: protected routes fail closed (503, nothing forwarded), pass-through
// routes keep working, and when Postgres is back the proxy recovers without a restart.
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
  let recovered = await postJson(`${proxy.url}/payments`, 'after-outage', { a: 1 });
  for (let i = 0; i < 20 && recovered.status === 503; i++) {
    await sleep(250);
    recovered = await postJson(`${proxy.url}/payments`, 'after-outage', { a: 1 });
  }
  expect(recovered.status).toBe(201);
  const replay = await postJson(`${proxy.url}/payments`, 'before-outage', { a: 1 });
  expect(replay.headers['idempotent-replayed']).toBe('true');
  expect(upstream.executions()).toHaveLength(executionsBefore + 1);
}, 120_000);
