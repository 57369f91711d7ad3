// From the edge's reading of a request to a routed one: the route, the method it is protected by,
// the path it is forwarded with, and whether it is protected — or the problem that refuses it. The
// request handler and the upgrade handler both route through here, so they cannot disagree.
import { type RouteConfig, SAFE_METHODS } from '../config/types';
import { ProxyError } from '../errors';
import { type EdgeRequest, METHOD_OVERRIDE_HEADERS } from './edge';
import { type RequestTarget, type Router, upstreamPath } from './router';

const OVERRIDE_HEADERS: ReadonlySet<string> = new Set(METHOD_OVERRIDE_HEADERS);

export interface RoutedRequest {
  readonly route: RouteConfig;
  readonly target: RequestTarget;
  /** The route has an idempotency policy and protects this method. */
  readonly protected: boolean;
}

export function routeRequest(router: Router, edge: EdgeRequest): RoutedRequest | ProxyError {
  const matched = router.match(edge);
  if (!matched)
    return new ProxyError(
      'ROUTE_NOT_FOUND',
      `No route in the proxy's configuration matches ${edge.method} ${edge.path}. Check the base URL, or add a route for it.`,
    );
  const { route, method } = matched;
  if (route.methodOverride && edge.overrideMethod === null)
    return new ProxyError(
      'METHOD_OVERRIDE_INVALID',
      'The method-override headers (X-HTTP-Method-Override, X-HTTP-Method, X-Method-Override) name no known method, or name different ones. Send one known method, or none.',
      { route: route.name },
    );
  const forwardPath = upstreamPath(route, edge);
  if (forwardPath === undefined)
    return new ProxyError(
      'REQUEST_TARGET_INVALID',
      `The path ${edge.path} would leave the upstream's base path ${route.upstream.basePath || '/'}; send a path inside it.`,
      { route: route.name },
    );
  // On a route whose upstream honours overrides, the proxy cannot know which of the override
  // headers it honours: protected when either the overriding method or the request line's is.
  const isProtected =
    route.idempotency !== null &&
    (isProtectedMethod(route, method) ||
      (route.methodOverride && isProtectedMethod(route, edge.method)));
  const reads = (name: string): boolean =>
    (isProtected && route.idempotency!.readsHeaders.has(name)) ||
    (route.methodOverride && OVERRIDE_HEADERS.has(name));
  const conflict = edge.connectionNames.find(reads);
  if (conflict !== undefined)
    return new ProxyError(
      'CONNECTION_HEADER_CONFLICT',
      `The Connection header names "${conflict}", which this route reads (for the key, tenant, fingerprint or method) and the proxy would have to drop on the way. Remove it from Connection.`,
      { route: route.name },
    );
  return {
    route,
    protected: isProtected,
    target: {
      method,
      path: edge.path,
      query: edge.query,
      forwardPath,
      authority: edge.authority ?? '',
      keepsForwarding: edge.keepsForwarding,
      keepsOverride: route.methodOverride,
    },
  };
}

/**
 * Protected routes protect unsafe methods; GET/HEAD/OPTIONS only when listed with allowSafeMethods.
 * MCP routes protect POST alone.
 */
function isProtectedMethod(route: RouteConfig, method: string): boolean {
  const policy = route.idempotency;
  // MCP's Streamable HTTP sends every message as a POST; GET opens a stream, DELETE ends a session.
  if (policy?.mcp) return method === 'POST';
  if (!SAFE_METHODS.has(method)) return true;
  return policy !== null && policy.allowSafeMethods && route.match.methods?.has(method) === true;
}
