// hashText must equal the server's hashtext() for any text, or the store groups a Citus batch by the
// wrong shard (slower: statements would span shards). Compared on the test PostgreSQL, for arbitrary
// strings of every length around lookup3's 12-byte blocks, multi-byte characters included.
import fc from 'fast-check';
import { hashText } from '../../src/db/hash-text';
import { ShardMap } from '../../src/db/shard-map';
import { testDatabaseClient } from '../support/test-database-client';

const client = testDatabaseClient();

async function serverHashes(texts: readonly string[]): Promise<number[]> {
  const { rows } = await client().query<{ hash: number }>(
    'SELECT hashtext(t) AS hash FROM unnest($1::text[]) WITH ORDINALITY AS u(t, n) ORDER BY n',
    [texts],
  );
  return rows.map((row) => row.hash);
}

test('hashText equals hashtext() for every length from 0 to 40 bytes', async () => {
  const texts = Array.from({ length: 41 }, (_, n) =>
    Array.from({ length: n }, (_, i) => String.fromCharCode(33 + ((i * 7 + n) % 90))).join(''),
  );
  expect(texts.map(hashText)).toEqual(await serverHashes(texts));
});

test('hashText equals hashtext() for arbitrary strings, multi-byte characters included', async () => {
  await fc.assert(
    fc.asyncProperty(
      fc.array(fc.string({ unit: 'grapheme', maxLength: 60 }), { minLength: 1, maxLength: 50 }),
      async (texts) => {
        // PostgreSQL text holds no NUL character.
        const clean = texts.map((text) => text.split(String.fromCharCode(0)).join(''));
        expect(clean.map(hashText)).toEqual(await serverHashes(clean));
      },
    ),
    { numRuns: 40 },
  );
});

test('a shard map finds the shard whose hash range holds the key', () => {
  // Four shards over the int4 range, as Citus lays them out.
  const map = ShardMap.of([
    [1073741824, 'd'],
    [-2147483648, 'a'],
    [0, 'c'],
    [-1073741824, 'b'],
  ]);
  expect(map.shardIds).toEqual(['a', 'b', 'c', 'd']);
  for (const key of ['a', 'bench-1', 'bench-2', 'ünïcødé', 'x'.repeat(300)]) {
    const hash = hashText(key);
    const expected = hash < -1073741824 ? 0 : hash < 0 ? 1 : hash < 1073741824 ? 2 : 3;
    expect(map.shardOf(key)).toBe(expected);
  }
  expect(ShardMap.of([]).shardOf('any')).toBe(0);
});
