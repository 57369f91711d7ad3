import { Client } from 'pg';
test('the suite has a real PostgreSQL', async () => {
  const client = new Client({ connectionString: process.env.DATABASE_URL });
  await client.connect();
  const { rows } = await client.query<{ v: string }>('select version() as v');
  await client.end();
  expect(rows[0]?.v).toMatch(/PostgreSQL/);
  console.log(process.env.DATABASE_URL, rows[0]?.v);
});
