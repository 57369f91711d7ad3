// The suite runs against a real PostgreSQL: the embedded server of the jest global setup, or the one
// at DATABASE_URL.
import { Client } from 'pg';

test('the suite has a real PostgreSQL', async () => {
  const client = new Client({ connectionString: process.env.DATABASE_URL });
  await client.connect();
  const { rows } = await client.query<{ v: string }>('select version() as v');
  await client.end();
  expect(rows[0]?.v).toMatch(/^PostgreSQL \d+/);
});
