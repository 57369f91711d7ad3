// A tenant scoped on a raw credential header (`tenant: [header:authorization]`) changes whenever the
// credential does: an agent whose OAuth access token is refreshed between a call that timed out and
// its retry lands in another scope, and the retry runs again. Not an error — a static API key is a
// stable tenant — but `check` and startup say so, and point at scoping by a verified claim.
import type { ProxyConfig } from '../config/types';

/** Headers that carry a bearer credential (a token that is refreshed or rotated), lower-case. */
const CREDENTIAL_HEADERS: ReadonlySet<string> = new Set([
  'authorization',
  'proxy-authorization',
  'cookie',
  'x-access-token',
  'x-auth-token',
  'x-forwarded-access-token',
  'x-amzn-oidc-accesstoken',
  'x-goog-iap-jwt-assertion',
  'cf-access-jwt-assertion',
]);

export interface TenantWarning {
  readonly route: string;
  readonly message: string;
}

export function tenantWarnings(config: ProxyConfig): TenantWarning[] {
  const warnings: TenantWarning[] = [];
  for (const route of config.routes) {
    const tenant = route.idempotency?.tenant ?? [];
    for (const part of tenant) {
      const header = part.startsWith('header:') ? part.slice('header:'.length) : undefined;
      if (header === undefined || !CREDENTIAL_HEADERS.has(header)) continue;
      warnings.push({
        route: route.name,
        message: `route "${route.name}" scopes keys on ${part}, a credential: when the caller's token is refreshed (or its session cookie renewed) between an attempt and its retry, the retry lands in another scope and runs again. Scope on who the caller is instead: tenant: [jwt:sub] with auth.jwt (config/README.md#auth).`,
      });
    }
  }
  return warnings;
}
