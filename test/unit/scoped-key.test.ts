// key.forward: scoped — the value an upstream that dedupes on Idempotency-Key receives instead of the
// client's key: the record's identity (scope, tenant, key) hashed, so it is stable for one caller's
// retries and differs wherever the proxy keeps two records apart.
import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { tenantHash } from '../../src/idempotency/tenant';
import { scopedKey } from '../../src/protected/outgoing';

const TENANTED = { scope: 'refunds', tenant: ['header:authorization'] };
const alice = { authorization: 'Bearer alice' };
const bob = { authorization: 'Bearer bob' };

test('is the SHA-256 of scope, tenant hash and key, one per line, in lower-case hex', () => {
  const expected = createHash('sha256')
    .update(`refunds\n${tenantHash(alice, TENANTED.tenant)}\nk-1`)
    .digest('hex');
  expect(scopedKey(TENANTED, alice, 'k-1')).toBe(expected);
  expect(expected).toMatch(/^[0-9a-f]{64}$/);
});

test('an untenanted route hashes an empty tenant', () => {
  const expected = createHash('sha256').update('refunds\n\nk-1').digest('hex');
  expect(scopedKey({ scope: 'refunds', tenant: [] }, alice, 'k-1')).toBe(expected);
});

test('stable for one tenant and key; different across tenants, scopes and keys', () => {
  const key = fc.stringMatching(/^[!-~]{1,40}$/);
  fc.assert(
    fc.property(key, key, (k1, k2) => {
      expect(scopedKey(TENANTED, alice, k1)).toBe(scopedKey(TENANTED, { ...alice }, k1));
      expect(scopedKey(TENANTED, alice, k1)).not.toBe(scopedKey(TENANTED, bob, k1));
      expect(scopedKey(TENANTED, alice, k1)).not.toBe(
        scopedKey({ ...TENANTED, scope: 'payments' }, alice, k1),
      );
      if (k1 !== k2)
        expect(scopedKey(TENANTED, alice, k1)).not.toBe(scopedKey(TENANTED, alice, k2));
      expect(scopedKey(TENANTED, alice, k1)).not.toContain(k1.length > 8 ? k1 : '\n');
    }),
  );
});

test('the tenant is read as the record is: "bearer  alice" is the tenant "Bearer alice"', () => {
  expect(scopedKey(TENANTED, { authorization: 'bearer   alice' }, 'k')).toBe(
    scopedKey(TENANTED, alice, 'k'),
  );
});
