// Statements whose connection is cut, on demand (reply-cutter.ts): before PostgreSQL saw them, or
// after they committed and before their reply reached the proxy. A completion is sent again until it
// lands (and one that had committed is found stored, not reported stale); a failed batch is split,
// each completion sent alone; a claim whose reply was lost is released by its token in the
// background, so its key runs on the next retry instead of ending as an unknown outcome.
import { randomBytes, randomUUID } from 'node:crypto';
import { Pool } from 'pg';
import { migrate } from '../../src/db/migrate';
import type { ClaimRequest, RecordId, StoredResponse } from '../../src/store/record';
import { PostgresKeyStore } from '../../src/store/postgres/key-store';
import type { PendingWrite, WriteObserver } from '../../src/store/postgres/pending-writes';
import type { Settlement } from '../../src/store/postgres/write-outbox';
import { until } from '../support/eventually';
import { postJson } from '../support/http';
import { databaseUrl, startProxy, uniqueTable } from '../support/proxy';
import { startReplyCutter, type ReplyCutter } from '../support/reply-cutter';
import { startUpstream, type TestUpstream } from '../support/upstream';

let cutter: ReplyCutter;
beforeAll(async () => {
  cutter = await startReplyCutter(databaseUrl());
});
afterAll(() => cutter?.close());

describe('the key store', () => {
  let pool: Pool;
  let store: PostgresKeyStore;
  let settled: [PendingWrite, Settlement][];
  const table = uniqueTable('lost');

  beforeAll(async () => {
    pool = new Pool({ connectionString: cutter.url, max: 2 });
    pool.on('error', () => undefined);
    await migrate(pool, table);
  });
  beforeEach(() => {
    settled = [];
    const writes: WriteObserver = { settled: (write, how) => settled.push([write, how]) };
    store = new PostgresKeyStore(pool, table, {
      distributed: false,
      writes,
      outbox: { holdMs: 20_000 },
    });
  });
  afterAll(() => pool?.end());

  const fresh = (name: string): RecordId => ({
    scope: 'orders',
    tenant: '',
    key: `${name}-${randomBytes(4).toString('hex')}`,
  });
  const claimOf = (id: RecordId): ClaimRequest => ({
    id,
    route: 'orders',
    fingerprint: Buffer.alloc(32, 7),
    leaseMs: 60_000,
    claimExpiryMs: 120_000,
  });
  const answer = (text: string): StoredResponse => ({
    status: 201,
    headers: [['content-type', 'text/plain']],
    body: Buffer.from(text),
    bodyOmitted: false,
    outcomeUnknown: false,
  });
  const claimed = async (id: RecordId): Promise<string> => {
    const claim = await store.claim(claimOf(id));
    if (claim.kind !== 'claimed') throw new Error(`expected a claim, got ${claim.kind}`);
    return claim.fence;
  };

  test.each(['before', 'after'] as const)(
    'a completion cut off %s it ran is sent again and stored',
    async (mode) => {
      const id = fresh(`complete-${mode}`);
      const fence = await claimed(id);
      const cut = cutter.cutOn(id.key, mode);
      await expect(store.complete(id, fence, answer('the answer'), 60_000)).resolves.toMatchObject({
        landing: 'stored',
      });
      await cut;
      expect(settled.map(([write, how]) => [write.kind, how])).toEqual([
        ['complete', { kind: 'landed', attempts: 2 }],
      ]);
      await expect(store.claim(claimOf(id))).resolves.toMatchObject({
        kind: 'completed',
        response: { status: 201, body: Buffer.from('the answer') },
      });
    },
  );

  test.each(['before', 'after'] as const)(
    'a batch of completions cut off %s it ran is split: each is sent again alone and stored',
    async (mode) => {
      const ids = Array.from({ length: 6 }, (_, n) => ({
        ...fresh('batch'),
        key: `batch-${mode}-${n}-${randomBytes(4).toString('hex')}`,
      }));
      const fences = await Promise.all(ids.map(claimed));
      const before = store.batchStats().completions;
      // The first runs alone at once; the other five wait for it and go as one batch, which the
      // marker (a key only that batch carries) cuts off.
      const cut = cutter.cutOn(ids[3]!.key, mode);
      const landings = await Promise.all(
        ids.map((id, n) => store.complete(id, fences[n]!, answer(`answer ${n}`), 60_000)),
      );
      await cut;
      expect(landings.map(({ landing }) => landing)).toEqual(ids.map(() => 'stored'));
      const after = store.batchStats().completions;
      // One statement for the first and one for the batch of five; the outbox sent each again.
      expect(after.largest).toBe(5);
      expect(after.batches - before.batches).toBe(2);
      expect(settled.map(([write, how]) => [write.id.key, how.kind]).sort()).toEqual(
        ids
          .slice(1)
          .map((id) => [id.key, 'landed'])
          .sort(),
      );
      const repeats = await Promise.all(ids.map((id) => store.claim(claimOf(id))));
      repeats.forEach((repeat, n) =>
        expect(repeat).toMatchObject({
          kind: 'completed',
          response: { body: Buffer.from(`answer ${n}`) },
        }),
      );
    },
  );

  test('a completion that finds the claim taken over is stale, and not stored', async () => {
    const id = fresh('stale');
    const fence = await claimed(id);
    // Another holder's token, drawn here: Citus refuses a volatile function in an UPDATE.
    await pool.query(`UPDATE ${table} SET claim_token = $2::uuid WHERE key = $1`, [
      id.key,
      randomUUID(),
    ]);
    const cut = cutter.cutOn(id.key, 'before');
    await expect(store.complete(id, fence, answer('too late'), 60_000)).resolves.toEqual({
      landing: 'stale',
    });
    await cut;
    expect(settled.map(([write, how]) => [write.kind, how.kind])).toEqual([['complete', 'stale']]);
  });

  test('a claim whose reply was lost after it committed is released by its token in the background', async () => {
    const id = fresh('claim-after');
    const cut = cutter.cutOn(id.key, 'after');
    await expect(store.claim(claimOf(id))).rejects.toThrow();
    await cut;
    await until(() => settled.length > 0, 'the background release');
    expect(settled.map(([write, how]) => [write.kind, how.kind])).toEqual([
      ['release_claim', 'landed'],
    ]);
    // The key is free: its retry claims it and runs.
    await expect(store.claim(claimOf(id))).resolves.toMatchObject({ kind: 'claimed' });
  });

  test('a claim cut off before PostgreSQL saw it leaves nothing to release', async () => {
    const id = fresh('claim-before');
    const cut = cutter.cutOn(id.key, 'before');
    await expect(store.claim(claimOf(id))).rejects.toThrow();
    await cut;
    await until(() => settled.length > 0, 'the background release');
    expect(settled.map(([write, how]) => [write.kind, how.kind])).toEqual([
      ['release_claim', 'stale'],
    ]);
    await expect(store.claim(claimOf(id))).resolves.toMatchObject({ kind: 'claimed' });
  });
});

describe('through the proxy', () => {
  let upstream: TestUpstream;
  let proxy: Awaited<ReturnType<typeof startProxy>>;
  const runs = (key: string): number =>
    upstream.executions().filter((r) => r.headers['idempotency-key'] === key).length;

  beforeAll(async () => {
    // Its answer carries a marker of its own: the completion is the only statement that sends it.
    upstream = await startUpstream((req, res) => {
      res.writeHead(201, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          marker: req.headers['x-marker'],
          runs: runs(String(req.headers['idempotency-key'])),
        }),
      );
    });
    proxy = await startProxy({
      databaseUrl: cutter.url,
      yaml: `
store: { table: "\${TEST_TABLE}" }
upstreams: { api: { url: ${upstream.url}, timeout: 1s } }
routes:
  - name: orders
    match: { method: POST, path: /orders }
    upstream: api
    idempotency: { lockTimeout: 2500ms, unknownOutcome: fail }
`,
    });
  });
  afterAll(async () => {
    await proxy?.close();
    await upstream?.close();
  });

  test.each(['before', 'after'] as const)(
    'an answer whose completion was cut off %s it ran is stored: its retry replays it',
    async (mode) => {
      const key = `answer-${mode}-${randomBytes(4).toString('hex')}`;
      const marker = `marker-${randomBytes(6).toString('hex')}`;
      const cut = cutter.cutOn(marker, mode);
      const first = await postJson(`${proxy.url}/orders`, key, { key }, { 'x-marker': marker });
      await cut;
      expect(first.status).toBe(201);
      const retry = await postJson(`${proxy.url}/orders`, key, { key }, { 'x-marker': marker });
      expect(retry.status).toBe(201);
      expect(retry.headers['idempotent-replayed']).toBe('true');
      expect(retry.text()).toBe(first.text());
      expect(runs(key)).toBe(1);
    },
  );

  test('a claim whose reply was lost: 503, and then the key runs once, never an unknown outcome', async () => {
    const key = `claim-${randomBytes(4).toString('hex')}`;
    const cut = cutter.cutOn(key, 'after');
    const first = await postJson(`${proxy.url}/orders`, key, { key });
    await cut;
    expect(first.status).toBe(503);
    expect(runs(key)).toBe(0);
    // Until the release lands a retry may find the claim (409); past the lease it would have been
    // the unknown-outcome 502 for good.
    const seen: string[] = [];
    await until(
      async () => {
        const retry = await postJson(`${proxy.url}/orders`, key, { key });
        const outcome = retry.headers['idempotency-outcome'];
        seen.push(`${retry.status}${outcome ? ` ${String(outcome)}` : ''}`);
        return retry.status !== 409;
      },
      'a retry other than 409',
      { timeoutMs: 6_000, intervalMs: 200 },
    );
    expect(seen.at(-1)).toBe('201');
    expect(seen.slice(0, -1).every((answer) => answer === '409')).toBe(true);
    expect(runs(key)).toBe(1);
  });
});
