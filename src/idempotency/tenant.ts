// The tenant half of a key's scope: a hash of the configured tenant parts, so two tenants sending
// the same key never share a record, and the raw tenant value (often a customer id or token) is
// never returned or stored.

import type { IncomingHttpHeaders } from 'node:http';
import { FramedHash, headerValues } from './fingerprint';

const HEADER_PREFIX = 'header:';
export const JWT_PREFIX = 'jwt:';

/** A verified token's claims (auth/jwt-principals.ts), as the tenant reads them. */
export type Claims = Readonly<Record<string, unknown>>;

/**
 * Lower-case hex SHA-256 over the tenant parts, or '' when the route is not tenanted. Framed like
 * fingerprints ("idempotency-proxy/tenant/v1", then per part "header", its name, and "absent" or
 * "present" with the counted values; or "jwt", the claim's name and its value), so an empty header
 * differs from a missing one.
 *
 * A request without the tenant header is not rejected here: it gets the one shared "absent"
 * tenant, so all such requests share keys with each other (and only with each other). Routes
 * that must have a tenant should reject the request before this point. A `jwt:<claim>` part reads
 * `claims`, which the pipeline has verified and checked to hold every such claim as a string or
 * number (protected/principal.ts): a refreshed token with the same claim is the same tenant. A
 * number and its string spelling (7, "7") are different tenants.
 *
 * The admin API hashes its `?tenant=` value the same way by passing `{ [name]: value }` as headers
 * and `{ [claim]: value }` as claims.
 */
export function tenantHash(
  headers: IncomingHttpHeaders,
  tenantParts: readonly string[],
  claims?: Claims,
): string {
  if (tenantParts.length === 0) return '';
  const framed = new FramedHash('tenant/v1');
  for (const part of tenantParts) {
    if (part.startsWith(JWT_PREFIX)) {
      const claim = part.slice(JWT_PREFIX.length);
      const value = claims?.[claim];
      // Only the admin API's lookups without a value get here without the claim.
      const known = typeof value === 'string' || typeof value === 'number';
      framed
        .field('jwt')
        .field(claim)
        .optionalList(known ? [typeof value, String(value)] : undefined);
      continue;
    }
    if (!part.startsWith(HEADER_PREFIX)) {
      // Config validation only lets `header:<name>` and `jwt:<claim>` through.
      throw new TypeError(
        `unsupported tenant part ${JSON.stringify(part)}; expected "header:<name>" or "jwt:<claim>"`,
      );
    }
    const name = part.slice(HEADER_PREFIX.length).toLowerCase();
    const values = headerValues(headers, name);
    framed
      .field('header')
      .field(name)
      .optionalList(name === 'authorization' ? values?.map(canonicalCredentials) : values);
  }
  return framed.digest().toString('hex');
}

const CREDENTIALS = /^([!#$%&'*+.^_`|~0-9A-Za-z-]+)(?:[ \t]+(.*))?$/s;

/**
 * One spelling per caller (src/http/README.md, RFC 9110 §11.1): the auth scheme is case-insensitive
 * and any run of whitespace after it counts as one space, so `bearer   A` and `Bearer A` are one
 * tenant while `Bearer a` is another (credentials are compared exactly). The scheme is spelt with a
 * capital first letter — `Bearer`, `Basic`, as clients send them — so tenants hashed before this
 * rule keep their scope.
 */
export function canonicalCredentials(value: string): string {
  const match = CREDENTIALS.exec(value.trim());
  if (match === null) return value;
  const scheme = match[1]!;
  const spelt = scheme[0]!.toUpperCase() + scheme.slice(1).toLowerCase();
  return match[2] === undefined ? spelt : `${spelt} ${match[2]}`;
}
