// The status monitors of REST calls answered `202 Accepted` under `Prefer: respond-async`
// (RFC 7240; docs/long-calls.md). A monitor lives on the proxy, outside every route's paths:
//
//   /_idempotency/monitors/<route>/<token>     token: the handle's secret, then the key (long-calls.ts)
//
// The route in the path gives the policy (scope, tenant, the token its claims need); the poller's
// own credentials give the tenant, so another tenant's GET finds nothing. Any instance answers.
import type { RouteConfig } from '../config/types';
import { ProxyError } from '../errors';
import type { EdgeRequest } from '../http/edge';
import type { RoutedRequest } from '../http/route-request';

export const MONITOR_PREFIX = '/_idempotency/monitors/';

/** The path of the monitor for a handle's `token` on `route`. */
export function monitorPath(route: string, token: string): string {
  return `${MONITOR_PREFIX}${encodeURIComponent(route)}/${token}`;
}

/** The handle token a monitor's path names (the route was matched by routeMonitor). */
export function monitorToken(path: string): string {
  return path.slice(path.lastIndexOf('/') + 1);
}

/**
 * A request for a monitor, routed to the route it belongs to as a protected request (its REST
 * adapter reads the poll); undefined for any other path. Only routes with idempotency.async have
 * monitors.
 */
export function routeMonitor(
  routes: readonly RouteConfig[],
  edge: EdgeRequest,
): RoutedRequest | ProxyError | undefined {
  if (!edge.path.startsWith(MONITOR_PREFIX)) return undefined;
  const parts = edge.path.slice(MONITOR_PREFIX.length).split('/');
  const name = parts.length === 2 ? safeDecode(parts[0]!) : undefined;
  const route = routes.find((candidate) => candidate.name === name);
  if (route === undefined || route.idempotency?.async == null)
    return new ProxyError(
      'MONITOR_NOT_FOUND',
      'There is no status monitor at this address: use the Location of the 202 Accepted answer as it came.',
    );
  if (edge.method !== 'GET' && edge.method !== 'HEAD')
    return new ProxyError(
      'MONITOR_METHOD_NOT_ALLOWED',
      'A status monitor is only read: send GET (the call it watches cannot be changed through it).',
      { route: route.name },
    );
  return {
    route,
    protected: true,
    target: {
      method: 'GET',
      path: edge.path,
      query: '',
      forwardPath: edge.path,
      authority: edge.authority ?? '',
      keepsForwarding: edge.keepsForwarding,
      keepsOverride: false,
      body: undefined,
      headers: edge.headers,
    },
  };
}

function safeDecode(text: string): string | undefined {
  try {
    return decodeURIComponent(text);
  } catch {
    return undefined;
  }
}
