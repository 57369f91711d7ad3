// A record's history (inspect, GET /keys): the claim and the completion come from the row itself,
// the exceptional events (takeovers, unknown-outcome settlements) from what the store wrote.
import { PostgresKeyStore } from '../../src/store/postgres/key-store';
import { migrate } from '../../src/db/migrate';
import { createPool } from '../../src/db/pool';
import { findRecord } from '../../src/store/postgres/record-queries';
import type { StoredResponse } from '../../src/store/record';
import { databaseUrl, uniqueTable } from '../support/proxy';
import { sleep } from '../support/upstream';

const pool = createPool({ url: databaseUrl(), size: 2, onError: () => undefined });
afterAll(() => pool.end());

const response = (status: number): StoredResponse => ({
  status,
  headers: [],
  body: Buffer.from('{}'),
  bodyOmitted: false,
  outcomeUnknown: status >= 500,
});

async function setup() {
  const table = uniqueTable('history');
  await migrate(pool, table);
  const store = new PostgresKeyStore(pool, table);
  const claim = async (key: string, leaseMs: number) => {
    const result = await store.claim({
      id: { scope: 'orders', tenant: '', key },
      route: 'orders',
      fingerprint: Buffer.alloc(32, 1),
      leaseMs,
      claimExpiryMs: leaseMs + 60_000,
    });
    if (result.kind !== 'claimed') throw new Error(result.kind);
    return result.fence;
  };
  const view = async (key: string) =>
    (await findRecord(pool, table, { scope: 'orders', tenant: '', key }))!;
  return { store, claim, view };
}

test('claimed then completed', async () => {
  const { store, claim, view } = await setup();
  const fence = await claim('plain', 60_000);
  await store.complete({ scope: 'orders', tenant: '', key: 'plain' }, fence, response(201), 60_000);
  const record = await view('plain');
  expect(record.history).toEqual([
    { event: 'claimed', at: record.createdAt, fence: 1 },
    { event: 'completed', at: record.completedAt, fence: 1, status: 201 },
  ]);
});

test('claimed, taken over after the lease, completed by the new holder', async () => {
  const { store, claim, view } = await setup();
  const id = { scope: 'orders', tenant: '', key: 'taken' };
  const first = await claim('taken', 1);
  await sleep(20); // the 1 ms lease runs out
  const second = await store.takeOver(id, first, 60_000, 120_000);
  expect(second).not.toBeNull();
  expect(second).not.toBe(first);
  await store.complete(id, second!, response(201), 60_000);
  const record = await view('taken');
  expect(record.history.map(({ event, fence }) => [event, fence])).toEqual([
    ['claimed', 1],
    ['taken_over', 2],
    ['completed', 2],
  ]);
  expect(record.history.every((event) => !Number.isNaN(Date.parse(event.at)))).toBe(true);
});

test('claimed, then settled as an unknown outcome: no separate completion', async () => {
  const { store, claim, view } = await setup();
  const id = { scope: 'orders', tenant: '', key: 'unknown' };
  const fence = await claim('unknown', 1);
  await sleep(20); // the 1 ms lease runs out
  expect(await store.settleUnknown(id, fence, response(502), 60_000)).not.toBeNull();
  const record = await view('unknown');
  expect(record.history.map(({ event, fence: f, status }) => [event, f, status])).toEqual([
    ['claimed', 1, undefined],
    ['settled_unknown', 1, 502],
  ]);
});
