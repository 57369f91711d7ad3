// Where a record's scope comes from: the route's name (or group), and on a route scoped by path
// too (an ACP profile's keys belong to the caller and the endpoint path) that name, a space and the
// request path: `checkout /checkout_sessions/cs_1/complete`. The admin API and the CLI find the
// route of a record from its scope either way. key.forward: scoped sends the upstream a hash of
// the scope, the tenant and the key instead of the key (scopedKeyOf).
import { hash } from 'node:crypto';
import type { RouteConfig } from '../config/types';

/** The scope of a request to `path` on a route whose policy has `scope` and `scopeByPath`. */
export function scopeOf(policy: { scope: string; scopeByPath: boolean }, path: string): string {
  return policy.scopeByPath ? `${policy.scope} ${path}` : policy.scope;
}

/** The protected route whose records are stored under `scope`, if any. */
export function routeOfScope(
  routes: readonly RouteConfig[],
  scope: string,
): RouteConfig | undefined {
  return routes.find((route) => {
    const policy = route.idempotency;
    if (policy === null) return false;
    return policy.scope === scope || (policy.scopeByPath && scope.startsWith(`${policy.scope} /`));
  });
}

/**
 * key.forward: scoped for a record's identity (its tenant already hashed): one value per scope,
 * tenant and key. Neither a scope name nor a key can hold a newline, so the parts cannot run into
 * each other.
 */
export function scopedKeyOf(id: { scope: string; tenant: string; key: string }): string {
  return hash('sha256', `${id.scope}\n${id.tenant}\n${id.key}`, 'hex');
}
