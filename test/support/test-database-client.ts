// One pg client on the test PostgreSQL for a test file: connected before its tests, ended after.
import { Client } from 'pg';
import { databaseUrl } from './proxy';

/** Registers the hooks; the returned function gives the client inside a test. */
export function testDatabaseClient(): () => Client {
  let client: Client | undefined;
  beforeAll(async () => {
    client = new Client({ connectionString: databaseUrl() });
    await client.connect();
  });
  afterAll(async () => {
    await client?.end();
  });
  return () => {
    if (client === undefined) throw new Error('the test database client is connected in beforeAll');
    return client;
  };
}
