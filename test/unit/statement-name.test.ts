// Statement names are digests of their text: two sessions that meet on one server connection (a
// transaction pooler) can only share a name when they share the statement, and every name fits in
// PostgreSQL's 63 bytes whatever the table is called.
import { statementName } from '../../src/store/postgres/key-store';
import { buildStatements, claimStatement } from '../../src/store/postgres/statements';

test('a name follows the text: another table or another text is another name', () => {
  const long = 'k'.repeat(50);
  const a = buildStatements('keys_a').peek;
  const b = buildStatements('keys_b').peek;
  expect(statementName('peek', a)).toBe(statementName('peek', a));
  expect(statementName('peek', a)).not.toBe(statementName('peek', b));
  expect(statementName('claim_1', claimStatement(long, 1))).not.toBe(
    statementName('claim_1', claimStatement(`${long.slice(1)}x`, 1)),
  );
  for (const name of [
    statementName('settle_unknown', buildStatements(long).settleUnknown),
    statementName('claim_32', claimStatement(long, 32)),
  ])
    expect(Buffer.byteLength(name)).toBeLessThanOrEqual(63);
});
