// Writes a protected route's path can still reach unprotected (src/http/README.md): a method the
// route does not list falls through to a later pass-through route (`PATCH /refunds` reaching
// `/**`), or an earlier pass-through route takes the route's own requests. Not errors — a service
// may truly have no `PATCH /refunds` — but `check` and startup say so, since the upstream would run
// such a write unprotected if it has one.
import { createRouter } from '../http/router';
import type { ProxyConfig } from '../config/types';

const UNSAFE_METHODS = ['POST', 'PUT', 'PATCH', 'DELETE'] as const;

export interface RoutingWarning {
  readonly route: string;
  readonly message: string;
}

export function routingWarnings(config: ProxyConfig): RoutingWarning[] {
  const router = createRouter(config.routes);
  const warnings: RoutingWarning[] = [];
  for (const route of config.routes) {
    if (route.idempotency === null) continue;
    const path = samplePath(route.match.path);
    const host = route.match.host ?? undefined;
    const reachedBy = new Map<string, string[]>();
    const shadowedBy = new Map<string, string[]>();
    for (const method of UNSAFE_METHODS) {
      const taken = router.match({ method, host, path, overrideMethod: undefined })?.route;
      if (taken === undefined || taken === route || taken.idempotency !== null) continue;
      const listed = route.match.methods === null || route.match.methods.has(method);
      const into = listed ? shadowedBy : reachedBy;
      into.set(taken.name, [...(into.get(taken.name) ?? []), method]);
    }
    const where = `${route.match.path}${host === undefined ? '' : ` on host ${host}`}`;
    for (const [other, methods] of reachedBy)
      warnings.push({
        route: route.name,
        message: `route "${route.name}" protects ${list([...route.match.methods!])} ${where}, but ${list(methods)} ${where} reach pass-through route "${other}" unprotected. If the upstream takes them, list them in match.method (or leave match.method out: every unsafe method is then protected).`,
      });
    for (const [other, methods] of shadowedBy)
      warnings.push({
        route: route.name,
        message: `route "${route.name}" never sees ${list(methods)} ${where}: pass-through route "${other}" comes first and takes them unprotected. Move "${route.name}" above it.`,
      });
  }
  return warnings;
}

/** A path the pattern matches: parameters filled in, a prefix pattern's own prefix. */
function samplePath(pattern: string): string {
  const path = pattern.endsWith('/**') ? pattern.slice(0, -3) || '/' : pattern;
  return path.replace(/\/:[^/]+/g, '/x');
}

function list(items: readonly string[]): string {
  if (items.length <= 1) return items.join('');
  return `${items.slice(0, -1).join(', ')} and ${items[items.length - 1]!}`;
}
