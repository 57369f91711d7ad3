// The tenant half of a key's scope: a hash of the configured tenant parts, so two tenants sending
// the same key never share a record, and the raw tenant value (often a customer id or token) is
// never returned or stored.

import type { IncomingHttpHeaders } from 'node:http';
import { FramedHash, headerValues } from './fingerprint';

const HEADER_PREFIX = 'header:';

/**
 * Lower-case hex SHA-256 over the tenant parts (`header:<name>`), or '' when the route is not
 * tenanted. Framed like fingerprints ("idempotency-proxy/tenant/v1", then per part "header", its
 * name, and "absent" or "present" with the counted values), so an empty header differs from a
 * missing one.
 *
 * A request without the tenant header is not rejected here: it gets the one shared "absent"
 * tenant, so all such requests share keys with each other (and only with each other). Routes
 * that must have a tenant should reject the request before this point.
 *
 * The admin API hashes its `?tenant=` value the same way by passing `{ [name]: value }` as headers.
 */
export function tenantHash(headers: IncomingHttpHeaders, tenantParts: readonly string[]): string {
  if (tenantParts.length === 0) return '';
  const framed = new FramedHash('tenant/v1');
  for (const part of tenantParts) {
    if (!part.startsWith(HEADER_PREFIX)) {
      // Config validation only lets `header:<name>` through; anything else is a programming error.
      throw new TypeError(
        `unsupported tenant part ${JSON.stringify(part)}; expected "header:<name>"`,
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
