// A database error in the log is its code, first line and server: never the pg client pg-pool
// attaches to it (err.client), whose queued queries carry their SQL.
import { databaseErrorFields, serverAddress } from '../../src/db/store-failure';

test('the code, the first line of the message and the server; nothing else of the error', () => {
  const error = Object.assign(
    new Error('terminating connection due to administrator command\nDETAIL: more'),
    {
      code: '57P01',
      client: { queryQueue: [{ text: 'INSERT INTO keys VALUES ($1)' }], password: 'postgres' },
    },
  );
  const fields = databaseErrorFields(error, serverAddress('postgres://u:p@db.example:6543/x'));
  expect(fields).toEqual({
    code: '57P01',
    error: 'terminating connection due to administrator command',
    server: 'db.example:6543',
  });
  expect(JSON.stringify(fields)).not.toMatch(/INSERT|client|postgres/);
});

test('an error without a code, and a URL without a port or that is not a URL', () => {
  expect(databaseErrorFields('the connection ended')).toEqual({ error: 'the connection ended' });
  expect(serverAddress('postgres://localhost/db')).toBe('localhost:5432');
  expect(serverAddress('host=/tmp dbname=x')).toBeUndefined();
});
