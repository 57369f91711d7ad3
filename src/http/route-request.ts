// From the edge's reading of a request to a routed one: the route, the method it is protected by,
// the path it is forwarded with, and whether it is protected — or the problem that refuses it. The
// request handler and the upgrade handler both route through here, so they cannot disagree.
//
//   path as sent ─► route ─┐
//   servlet reading (";…" removed) ─► route ─┤ either protected → protected under it; two
//                                            │ different protected routes → 400
//   trimmed / decoded-twice readings ─► route ─► a protected route the path as sent misses → 400
//   POST where a `_method` could reach another protected route ─► query (and form or JSON body,
//   read here: routeWithBody) searched for it: honoured on methodOverride routes, else removed
import type { RouteConfig } from '../config/types';
import { ProxyError } from '../errors';
import { type EdgeRequest, KNOWN_METHODS, METHOD_OVERRIDE_HEADERS } from './edge';
import {
  formMethodParams,
  jsonMethodParams,
  methodBodyKind,
  type MethodParams,
  multipartMethodParams,
} from './method-param';
import { protectsMethod, type RouteMatch, type Router, upstreamPath } from './router';
import type { RequestTarget } from './router';

const OVERRIDE_HEADERS: ReadonlySet<string> = new Set(METHOD_OVERRIDE_HEADERS);

export interface RoutedRequest {
  readonly route: RouteConfig;
  readonly target: RequestTarget;
  /** The route has an idempotency policy and protects this method. */
  readonly protected: boolean;
}

/**
 * The request must be routed again once its body is read (at most `limitBytes`, else 413): it may
 * hold a `_method` (routeWithBody).
 */
export interface BodyNeeded {
  readonly limitBytes: number;
  readonly edge: EdgeRequest;
}

export function routeRequest(
  router: Router,
  edge: EdgeRequest,
): RoutedRequest | ProxyError | BodyNeeded {
  const matched = matchReadings(router, edge);
  if (matched instanceof ProxyError) return matched;
  if (edge.method !== 'POST') return routed(matched, edge, edge.query, undefined);
  // Every reading counts: `/%2570ayments/1%20` is `/payments/1` to an upstream that decodes twice
  // and trims, and a `_method=DELETE` would run it there as a DELETE nobody protected.
  const readings = edge.readings;
  const paths =
    readings === undefined
      ? [edge.path]
      : [
          edge.path,
          ...(readings.servlet === undefined ? [] : [readings.servlet]),
          ...readings.suspect,
        ];
  const limit = router.methodParamLimit(
    edge.host,
    paths,
    matched?.route,
    matched !== undefined && isProtected(matched, edge),
  );
  if (limit === undefined) return routed(matched, edge, edge.query, undefined);
  if (methodBodyKind(edge.headers.contentType) !== undefined) return { limitBytes: limit, edge };
  return withMethodParams(router, edge, formMethodParams(edge.query), undefined, undefined);
}

export function isBodyNeeded(value: unknown): value is BodyNeeded {
  return typeof value === 'object' && value !== null && 'limitBytes' in value;
}

/**
 * Routes a request whose body routeRequest asked for, now read (`body`, of `contentType`: an
 * upgrade's is none, whatever it says, since it carries no body).
 */
export function routeWithBody(
  router: Router,
  edge: EdgeRequest,
  contentType: string | undefined,
  body: Buffer,
): RoutedRequest | ProxyError {
  const kind = methodBodyKind(contentType);
  const query = formMethodParams(edge.query);
  let fromBody: MethodParams<Buffer> | 'json' | undefined;
  if (kind === 'form') {
    const form = formMethodParams(body.toString('latin1'));
    fromBody = {
      methods: form.methods,
      without: form.methods.length === 0 ? body : Buffer.from(form.without, 'latin1'),
    };
  } else if (kind === 'multipart') {
    fromBody = multipartMethodParams(body, contentType ?? '');
    if (fromBody === undefined)
      return new ProxyError(
        'METHOD_OVERRIDE_INVALID',
        'The multipart/form-data body has no boundary or no closing delimiter, so the proxy cannot tell whether it holds a _method field that would change the method the upstream runs. Send a well-formed multipart body.',
      );
  } else if (kind === 'json') fromBody = 'json';
  const jsonMethods = fromBody === 'json' ? jsonMethodParams(body) : [];
  const bodyParams: MethodParams<Buffer> =
    fromBody === 'json' || fromBody === undefined
      ? { methods: jsonMethods, without: body }
      : fromBody;
  const result = withMethodParams(router, edge, query, bodyParams, body);
  if (jsonMethods.length > 0 && !(result instanceof ProxyError) && !result.route.methodOverride)
    return new ProxyError(
      'METHOD_OVERRIDE_INVALID',
      'The JSON body has a "_method" field, which some frameworks (Laravel) read as the method to run, and this route does not honour method overrides. Remove "_method" from the body, or send the method you mean on the request line.',
      { route: result.route.name },
    );
  return result;
}

/**
 * Routes with the `_method` values found as override methods (like the override headers, they count
 * only on methodOverride routes, which forward the body as `sent`); on any other route they are
 * removed from what is forwarded.
 */
function withMethodParams(
  router: Router,
  edge: EdgeRequest,
  query: MethodParams<string>,
  body: MethodParams<Buffer> | undefined,
  sent: Buffer | undefined,
): RoutedRequest | ProxyError {
  const named = [...query.methods, ...(body?.methods ?? [])];
  let override = edge.overrideMethod;
  for (const method of named) {
    if (override === null) break;
    override =
      !KNOWN_METHODS.has(method) || (override !== undefined && override !== method) ? null : method;
  }
  const read: EdgeRequest =
    override === edge.overrideMethod ? edge : { ...edge, overrideMethod: override };
  const matched = matchReadings(router, read);
  if (matched instanceof ProxyError) return matched;
  // Honoured: the upstream applies the override itself, so it gets the `_method` it was sent.
  if (matched?.route.methodOverride) return routed(matched, read, edge.query, sent);
  // Not honoured: the upstream must not see it either, so it runs the request line's method.
  return routed(matched, edge, query.without, body?.without);
}

/**
 * The route of the path as sent, or of its servlet reading when that one is protected; a refusal
 * when the readings reach different protected routes, or a suspect reading (trimmed, decoded
 * twice) reaches a protected route the path as sent does not.
 */
function matchReadings(router: Router, edge: EdgeRequest): RouteMatch | undefined | ProxyError {
  const matched = router.match(edge);
  const readings = edge.readings;
  if (readings === undefined) return matched;
  let chosen = matched;
  if (readings.servlet !== undefined) {
    const servlet = router.match({ ...edge, path: readings.servlet });
    if (servlet !== undefined && isProtected(servlet, edge)) {
      if (matched !== undefined && matched.route !== servlet.route && isProtected(matched, edge))
        return ambiguous(edge, matched.route, servlet.route, 'with its ";" parameters removed');
      chosen = servlet;
    }
  }
  for (const path of readings.suspect) {
    const other = router.match({ ...edge, path });
    if (other !== undefined && other.route !== chosen?.route && isProtected(other, edge))
      return ambiguous(edge, chosen?.route, other.route, `read as ${path}`);
  }
  return chosen;
}

function ambiguous(
  edge: EdgeRequest,
  sent: RouteConfig | undefined,
  other: RouteConfig,
  how: string,
): ProxyError {
  return new ProxyError(
    'REQUEST_TARGET_INVALID',
    `The path ${edge.path} reaches ${sent === undefined ? 'no route' : `route "${sent.name}"`} as sent but the protected route "${other.name}" ${how}, as some upstreams read it (servlet containers drop ";…" parameters; some trim whitespace or decode twice). Send the path in its plain form.`,
    { route: other.name },
  );
}

/** On a route whose upstream honours overrides, protected when either method is. */
function isProtected(match: RouteMatch, edge: EdgeRequest): boolean {
  const { route, method } = match;
  return (
    route.idempotency !== null &&
    (protectsMethod(route, method) || (route.methodOverride && protectsMethod(route, edge.method)))
  );
}

function routed(
  matched: RouteMatch | undefined,
  edge: EdgeRequest,
  query: string,
  body: Buffer | undefined,
): RoutedRequest | ProxyError {
  if (!matched)
    return new ProxyError(
      'ROUTE_NOT_FOUND',
      `No route in the proxy's configuration matches ${edge.method} ${edge.path}. Check the base URL, or add a route for it.`,
    );
  const { route, method } = matched;
  if (route.methodOverride && edge.overrideMethod === null)
    return new ProxyError(
      'METHOD_OVERRIDE_INVALID',
      'The method-override headers (X-HTTP-Method-Override, X-HTTP-Method, X-Method-Override) or _method parameters name no known method, or name different ones. Send one known method, or none.',
      { route: route.name },
    );
  const forwardPath = upstreamPath(route, { path: edge.path, query });
  if (forwardPath === undefined)
    return new ProxyError(
      'REQUEST_TARGET_INVALID',
      `The path ${edge.path} would leave the upstream's base path ${route.upstream.basePath || '/'}; send a path inside it.`,
      { route: route.name },
    );
  // On a route whose upstream honours overrides, the proxy cannot know which of the override
  // headers it honours: protected when either the overriding method or the request line's is.
  const isProtectedRequest = isProtected(matched, edge);
  const reads = (name: string): boolean =>
    (isProtectedRequest && route.idempotency!.readsHeaders.has(name)) ||
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
    protected: isProtectedRequest,
    target: {
      method,
      path: edge.path,
      query,
      forwardPath,
      authority: edge.authority ?? '',
      keepsForwarding: edge.keepsForwarding,
      keepsOverride: route.methodOverride,
      body,
      headers: edge.headers,
    },
  };
}
