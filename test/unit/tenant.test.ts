import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { tenantHash } from '../../src/idempotency/tenant';

const PARTS = ['header:x-tenant'];

describe('tenantHash', () => {
  it('is empty when the route is not tenanted', () => {
    expect(tenantHash({ 'x-tenant': 'acme' }, [])).toBe('');
  });

  it('is 64 lower-case hex characters', () => {
    expect(tenantHash({ 'x-tenant': 'acme' }, PARTS)).toMatch(/^[0-9a-f]{64}$/);
  });

  it('is the documented framing (known-answer test: changing it moves every tenant to a new scope)', () => {
    const field = (value: string): Buffer => {
      const length = Buffer.alloc(8);
      length.writeBigUInt64BE(BigInt(Buffer.byteLength(value)));
      return Buffer.concat([length, Buffer.from(value)]);
    };
    const expected = createHash('sha256')
      .update(
        Buffer.concat(
          ['idempotency-proxy/tenant/v1', 'header', 'x-tenant', 'present', '1', 'acme'].map(field),
        ),
      )
      .digest('hex');
    expect(tenantHash({ 'x-tenant': 'acme' }, PARTS)).toBe(expected);
  });

  it('gives the same tenant the same hash and different tenants different hashes', () => {
    expect(tenantHash({ 'x-tenant': 'acme' }, PARTS)).toBe(
      tenantHash({ 'x-tenant': 'acme' }, PARTS),
    );
    expect(tenantHash({ 'x-tenant': 'acme' }, PARTS)).not.toBe(
      tenantHash({ 'x-tenant': 'globex' }, PARTS),
    );
  });

  it('never contains the raw tenant value', () => {
    fc.assert(
      fc.property(fc.string({ minLength: 1 }), (tenant) => {
        const hash = tenantHash({ 'x-tenant': tenant }, PARTS);
        expect(hash).toMatch(/^[0-9a-f]{64}$/);
        if (tenant.length > 3) expect(hash.includes(tenant)).toBe(false);
      }),
    );
  });

  it('puts every request without the tenant header in one shared "absent" tenant', () => {
    expect(tenantHash({}, PARTS)).toBe(tenantHash({ other: 'x' }, PARTS));
    expect(tenantHash({}, PARTS)).toMatch(/^[0-9a-f]{64}$/);
  });

  it('keeps the absent tenant distinct from an empty header value', () => {
    expect(tenantHash({}, PARTS)).not.toBe(tenantHash({ 'x-tenant': '' }, PARTS));
  });

  it('frames several parts so values cannot shift between them', () => {
    const parts = ['header:x-org', 'header:x-team'];
    expect(tenantHash({ 'x-org': 'ab', 'x-team': 'c' }, parts)).not.toBe(
      tenantHash({ 'x-org': 'a', 'x-team': 'bc' }, parts),
    );
    expect(tenantHash({ 'x-org': 'a' }, parts)).not.toBe(tenantHash({ 'x-team': 'a' }, parts));
  });

  it('reads header names case-insensitively from the part', () => {
    expect(tenantHash({ 'x-tenant': 'acme' }, ['header:X-Tenant'])).toBe(
      tenantHash({ 'x-tenant': 'acme' }, PARTS),
    );
  });

  it('lets the admin API hash a raw ?tenant= value the same way as a request', () => {
    const fromRequest = tenantHash({ host: 'h', 'x-tenant': 'acme', 'content-type': 'a/b' }, PARTS);
    expect(tenantHash({ 'x-tenant': 'acme' }, PARTS)).toBe(fromRequest);
  });

  it('refuses a part that is not header:<name>', () => {
    expect(() => tenantHash({}, ['query:tenant'])).toThrow(
      /unsupported tenant part "query:tenant"/,
    );
  });

  it('is injective over random tenant values', () => {
    fc.assert(
      fc.property(fc.option(fc.string()), fc.option(fc.string()), (a, b) => {
        const headers = (v: string | null): Record<string, string> =>
          v === null ? {} : { 'x-tenant': v };
        expect(tenantHash(headers(a), PARTS) === tenantHash(headers(b), PARTS)).toBe(a === b);
      }),
    );
  });
});
