// Migrations: applied once, safe when many replicas start at the same moment, never with SQL in a name.
import { quoteTableName } from '../../src/db/identifier';
import { PostgresKeyStore } from '../../src/store/postgres/key-store';
import { LATEST_VERSION, migrate } from '../../src/db/migrate';
import { MIGRATIONS } from '../../src/db/migrations';
import { createPool } from '../../src/db/pool';
import { databaseUrl, uniqueTable } from '../support/proxy';
import { testUnless } from '../support/run-report';
import { plainPostgresOnly, storeIsCitus } from '../support/store-kind';

const pool = createPool({ url: databaseUrl(), size: 8, onError: () => undefined });
afterAll(() => pool.end());

test('applies every migration once, even when several replicas migrate at the same moment', async () => {
  const table = uniqueTable('migrate');
  const results = await Promise.all(Array.from({ length: 5 }, () => migrate(pool, table)));
  const applied = results.flatMap((r) => r.applied);
  expect(applied).toEqual([...Array(LATEST_VERSION).keys()].map((i) => i + 1));
  expect(results.every((r) => r.current === LATEST_VERSION)).toBe(true);
  const { rows } = await pool.query(`SELECT version FROM ${quoteTableName(`${table}_migrations`)}`);
  expect(rows).toHaveLength(LATEST_VERSION);
  const again = await migrate(pool, table);
  expect(again).toEqual({ applied: [], current: LATEST_VERSION });
  const columns = await pool.query(
    `SELECT column_name FROM information_schema.columns WHERE table_name = $1 ORDER BY ordinal_position`,
    [table],
  );
  expect(columns.rows.map((r: { column_name: string }) => r.column_name)).toEqual(
    expect.arrayContaining([
      'scope',
      'tenant',
      'key',
      'fingerprint',
      'state',
      'fence',
      'lease_expires_at',
      'status',
      'headers',
      'body',
      'attempts',
      'replays',
      'expires_at',
      'prune_after',
    ]),
  );
});

test.each(['keys; drop table x', 'Keys', 'keys"', '1keys', 'a'.repeat(51), ''])(
  'refuses the table name %j before it reaches SQL',
  async (name) => {
    expect(() => quoteTableName(name)).toThrow(/invalid table name/);
    await expect(migrate(pool, name)).rejects.toThrow(/invalid table name/);
  },
);

test('migration 3 gives existing rows their prune_after and moves the pruner index off expires_at', async () => {
  const table = uniqueTable('migrate');
  const t = quoteTableName(table);
  const versions = quoteTableName(`${table}_migrations`);
  // A table as version 2 left it, with a record in it.
  await pool.query(
    `CREATE TABLE ${versions} (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
  );
  for (const migration of MIGRATIONS.filter((m) => m.version <= 2)) {
    await pool.query(migration.sql(t, table));
    await pool.query(`INSERT INTO ${versions} (version, name) VALUES ($1, $2)`, [
      migration.version,
      migration.name,
    ]);
  }
  await pool.query(
    `INSERT INTO ${t} (scope, key, route, fingerprint, state, claim_token, expires_at)
     VALUES ('orders', 'old', 'orders', '\\x00', 'completed', gen_random_uuid(), '2030-01-02T03:04:05Z')`,
  );
  // On Citus the same run also distributes the table it found plain, rows and all.
  expect(await migrate(pool, table)).toEqual({
    applied: MIGRATIONS.filter((m) => m.version > 2).map((m) => m.version),
    current: MIGRATIONS.at(-1)!.version,
    ...(storeIsCitus() ? { distributed: true } : {}),
  });
  const { rows } = await pool.query<{ same: boolean }>(
    `SELECT prune_after = expires_at AS same FROM ${t} WHERE key = 'old'`,
  );
  expect(rows).toEqual([{ same: true }]);
  const indexes = await pool.query<{ indexname: string }>(
    `SELECT indexname FROM pg_indexes WHERE tablename = $1 ORDER BY indexname`,
    [table],
  );
  expect(indexes.rows.map((r) => r.indexname)).toEqual([
    `${table}_pkey`,
    `${table}_prune_after_idx`,
    `${table}_unknown_idx`,
  ]);
});

testUnless(
  plainPostgresOnly(
    "HOT updates are counted by the server that holds the row, on Citus a worker's shard",
  ),
  'migrate.test.ts: HOT updates',
)(
  'a completion within its lease and a replay touch no indexed column, so PostgreSQL updates the row in place',
  async () => {
    const table = uniqueTable('hot');
    const single = createPool({ url: databaseUrl(), size: 1, onError: () => undefined });
    try {
      await migrate(single, table);
      const store = new PostgresKeyStore(single, table);
      const id = (n: number) => ({ scope: 'orders', tenant: '', key: `hot-${n}` });
      for (let n = 0; n < 10; n++) {
        const claim = await store.claim({
          id: id(n),
          route: 'orders',
          fingerprint: Buffer.alloc(32, n),
          leaseMs: 60_000,
          claimExpiryMs: 60_000 + 3_600_000,
        });
        if (claim.kind !== 'claimed') throw new Error(claim.kind);
        const response = {
          status: 201,
          headers: [],
          body: Buffer.from('{}'),
          bodyOmitted: false,
          outcomeUnknown: false,
        };
        expect((await store.complete(id(n), claim.fence, response, 3_600_000)).landing).toBe(
          'stored',
        );
        // A repeat bumps attempts, replays and last_seen_at: none indexed (the console's index of
        // unknown outcomes, migration 4, is on created_at where outcome_unknown).
        const repeat = await store.claim({
          id: id(n),
          route: 'orders',
          fingerprint: Buffer.alloc(32, n),
          leaseMs: 60_000,
          claimExpiryMs: 60_000 + 3_600_000,
        });
        expect(repeat.kind).not.toBe('claimed');
      }
      // The pool's one session did the updates: make it publish its statistics now.
      await single.query('SELECT pg_stat_force_next_flush()');
      await single.query('SELECT pg_stat_clear_snapshot()');
      const { rows } = await single.query<{ updates: string; hot: string }>(
        `SELECT n_tup_upd AS updates, n_tup_hot_upd AS hot FROM pg_stat_user_tables WHERE relname = $1`,
        [table],
      );
      expect(rows).toEqual([{ updates: '20', hot: '20' }]);
    } finally {
      await single.end();
    }
  },
);
