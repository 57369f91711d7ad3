// A batch's columns go to PostgreSQL as array literals written by columnLiterals: whatever the
// values (quotes, backslashes, braces, commas, the word NULL, multi-byte text, any bytes, NULL
// itself), the server must read back exactly the values given. Checked on the test PostgreSQL.
import fc from 'fast-check';
import { type ArrayElement, columnLiterals } from '../../src/store/postgres/array-literal';
import { testDatabaseClient } from '../support/test-database-client';

const client = testDatabaseClient();

type Row = [text: string, bytes: Buffer | null, count: number, flag: boolean, json: string | null];

/** The rows as the server reads them back from the literals, in order. */
async function roundTrip(rows: Row[]): Promise<Row[]> {
  const { rows: back } = await client().query<Row>({
    text: `SELECT t, b, c::float8, f, j::text
             FROM unnest($1::text[], $2::bytea[], $3::bigint[], $4::boolean[], $5::jsonb[])
                  WITH ORDINALITY AS u(t, b, c, f, j, n)
            ORDER BY n`,
    values: columnLiterals(rows),
    rowMode: 'array',
  });
  return back;
}

/** Text PostgreSQL can hold: anything but NUL, and no lone surrogate (UTF-8 has none). */
const text = fc
  .oneof(
    fc.string({ unit: 'grapheme', maxLength: 40 }),
    fc.constantFrom(
      '',
      'NULL',
      'null',
      '"',
      '\\',
      '\\"',
      '{',
      '}',
      ',',
      ' a ',
      '{"a":"b\\\\c"}',
      'é∑😀',
    ),
    // Quotes and backslashes beside control characters and surrogate pairs (which JSON.stringify
    // would escape its own way).
    fc.string({
      unit: fc.constantFrom('"', '\\', ',', '{', '}', ' ', 'a', 'N', '\n', '\t', '\u001f', '😀'),
      maxLength: 20,
    }),
  )
  .filter((value) => !value.includes('\u0000'));

/** JSON as the store sends headers: JSON.stringify's text, which jsonb reads back the same. */
const json = fc
  .dictionary(fc.string({ maxLength: 10 }), text, { maxKeys: 4 })
  .map((value) => JSON.stringify(value));

const row: fc.Arbitrary<Row> = fc.tuple(
  text,
  fc.option(fc.uint8Array({ maxLength: 64 }).map((bytes) => Buffer.from(bytes))),
  fc.integer({ min: -(2 ** 40), max: 2 ** 40 }),
  fc.boolean(),
  fc.option(json),
);

test('any batch of rows is read back by the server exactly as given', async () => {
  await fc.assert(
    fc.asyncProperty(fc.array(row, { minLength: 1, maxLength: 12 }), async (rows) => {
      const back = await roundTrip(rows);
      expect(back.map(([t, b, c, f]) => [t, b, c, f])).toEqual(
        rows.map(([t, b, c, f]) => [t, b, c, f]),
      );
      // jsonb keeps its own spacing and key order: compared as values.
      expect(back.map(([, , , , j]) => (j === null ? null : JSON.parse(j)))).toEqual(
        rows.map(([, , , , j]) => (j === null ? null : JSON.parse(j))),
      );
    }),
    { numRuns: 150 },
  );
});

test('the literals for a small batch, element by element', () => {
  const rows: ArrayElement[][] = [
    ['a"b', Buffer.from([0, 255]), 7, true, null],
    ['c\\d', null, -1.5, false, 'NULL'],
  ];
  expect(columnLiterals(rows)).toEqual([
    '{"a\\"b","c\\\\d"}',
    '{\\\\x00ff,NULL}',
    '{7,-1.5}',
    '{t,f}',
    '{NULL,"NULL"}',
  ]);
});

test('a value no column can hold is refused, not written as something else', () => {
  expect(() => columnLiterals([[Number.NaN]])).toThrow('an array element is NaN');
  expect(() => columnLiterals([[{} as unknown as ArrayElement]])).toThrow('is an object');
});
