// Statement names are digests of their text: two sessions that meet on one server connection (a
// transaction pooler) can only share a name when they share the statement, and every name fits in
// PostgreSQL's 63 bytes whatever the table is called.
import { statementName } from '../../src/store/postgres/statement-layout';
import { buildStatements } from '../../src/store/postgres/statements';

test('a name follows the text: another table or another text is another name', () => {
  const long = 'k'.repeat(50);
  const a = buildStatements('keys_a').peek;
  const b = buildStatements('keys_b').peek;
  expect(statementName('peek', a)).toBe(statementName('peek', a));
  expect(statementName('peek', a)).not.toBe(statementName('peek', b));
  expect(statementName('claim', buildStatements(long).claimOne)).not.toBe(
    statementName('claim', buildStatements(`${long.slice(1)}x`).claimOne),
  );
  // On Citus a completion has no NOTIFY parameter: another statement, another name.
  expect(statementName('complete', buildStatements(long, true).completeOne)).not.toBe(
    statementName('complete', buildStatements(long).completeOne),
  );
  for (const name of [
    statementName('settle_unknown', buildStatements(long).settleUnknown),
    statementName('complete_batch', buildStatements(long).completeBatch),
  ])
    expect(Buffer.byteLength(name)).toBeLessThanOrEqual(63);
});
