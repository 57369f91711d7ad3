// Migrations: applied once, safe when many replicas start at the same moment, never with SQL in a name.
import { quoteTableName } from '../../src/db/identifier';
import { LATEST_VERSION, migrate } from '../../src/db/migrate';
import { createPool } from '../../src/db/pool';
import { databaseUrl, uniqueTable } from '../support/proxy';

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
