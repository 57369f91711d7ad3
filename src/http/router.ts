// Matches a request to the first route whose method, host and path match (config order). Path
// patterns are compiled once: exact (`/refunds`), parameters (`/orders/:id/refund`), or a prefix
// (`/mail/**`, which also matches `/mail` itself; `/**` matches everything). Protected routes match
// leniently (src/http/README.md): with a trailing slash and in any letter case, as Express and many
// frameworks route, so no spelling the upstream would take for the protected endpoint slips past to
// a pass-through route. The router only ever sees canonical paths (edge.ts).
import { type RouteConfig, SAFE_METHODS } from '../config/types';
import type { EdgeRequest } from './edge';
import type { HeaderFacts } from './header-lines';

/** A routed request as every later step reads it: decided once, at the edge and by the router. */
export interface RequestTarget {
  /** The method routing and protection use (an override header's, on routes that honour it). */
  readonly method: string;
  /** Canonical path, without the query; never empty. */
  readonly path: string;
  /** Raw query string without '?', '' if none. */
  readonly query: string;
  /** Path and query sent upstream: stripPrefix removed, the upstream's base path prepended. */
  readonly forwardPath: string;
  /** Canonical host[:port] the client addressed (sent as X-Forwarded-Host), '' if none. */
  readonly authority: string;
  /** Forward the client's X-Forwarded-Host/-Proto and Forwarded (a trusted proxy sent them). */
  readonly keepsForwarding: boolean;
  /** Forward method-override headers (the route honours them); otherwise they are removed. */
  readonly keepsOverride: boolean;
  /**
   * The body, when the edge read it to find a `_method` (route-request.ts): already without it
   * unless the route honours overrides. Undefined: the body is still on the request stream.
   */
  readonly body: Buffer | undefined;
  /** The few headers the edge read from the raw lines (Content-Type, Content-Length…). */
  readonly headers: HeaderFacts;
}

export interface RouteMatch {
  readonly route: RouteConfig;
  /** The method this route is matched and protected by. */
  readonly method: string;
}

export interface Router {
  match(
    request: Pick<EdgeRequest, 'method' | 'overrideMethod' | 'host' | 'path'>,
  ): RouteMatch | undefined;
  /**
   * For a POST routed to `routed`: could a `_method` make the upstream run it as a method some
   * other protected route protects on one of these paths? Then the largest maxRequestBytes of those
   * routes (the body may be read up to it); undefined when not (almost always: only routes that
   * protect a method other than POST count, found once, here).
   */
  methodParamLimit(
    host: string | undefined,
    paths: readonly string[],
    routed: RouteConfig | undefined,
    routedProtected: boolean,
  ): number | undefined;
}

type PathMatcher = (path: string) => boolean;

export function compilePathPattern(pattern: string): PathMatcher {
  if (pattern === '/**') return () => true;
  if (pattern.endsWith('/**')) {
    const prefix = pattern.slice(0, -3);
    const inner = compileSegments(prefix);
    const depth = prefix.split('/').length;
    return (path) => {
      const segments = path.split('/');
      if (segments.length < depth) return false;
      return inner(segments.slice(0, depth).join('/'));
    };
  }
  return compileSegments(pattern);
}

function compileSegments(pattern: string): PathMatcher {
  if (!pattern.includes('/:')) return (path) => path === pattern;
  const expected = pattern.split('/');
  return (path) => {
    const actual = path.split('/');
    if (actual.length !== expected.length) return false;
    for (let i = 0; i < expected.length; i++) {
      const want = expected[i]!;
      const got = actual[i]!;
      if (want.startsWith(':') ? got.length === 0 : want !== got) return false;
    }
    return true;
  };
}

export function createRouter(routes: readonly RouteConfig[]): Router {
  const compiled = routes.map((route) => ({
    route,
    methods: route.match.methods,
    host: route.match.host,
    matchPath: withFormats(
      route,
      isLenient(route) ? compileLenient(route.match.path) : compilePathPattern(route.match.path),
    ),
  }));
  // Routes a `_method` could turn a POST into: protected REST routes that protect another method.
  const overridable = compiled.filter(({ route, methods }) => {
    if (route.idempotency === null || route.idempotency.mcp !== null) return false;
    if (route.idempotency.a2a) return false;
    return methods === null || [...methods].some((m) => m !== 'POST' && protectsMethod(route, m));
  });
  return {
    methodParamLimit(host, paths, routed, routedProtected) {
      // An MCP or A2A message is JSON, read by the route's own body reader: no form, no `_method`.
      if (routed?.idempotency?.mcp || routed?.idempotency?.a2a) return undefined;
      let limit: number | undefined;
      for (const entry of overridable) {
        if (entry.route === routed && routedProtected) continue;
        if (entry.host !== null && entry.host !== host) continue;
        if (!paths.some(entry.matchPath)) continue;
        limit = Math.max(limit ?? 0, entry.route.idempotency!.maxRequestBytes);
      }
      return limit;
    },
    match(request) {
      const { host, path } = request;
      const override = request.overrideMethod;
      for (const entry of compiled) {
        const overrides = entry.route.methodOverride && typeof override === 'string';
        const method = overrides ? override : request.method;
        // A route whose upstream honours overrides takes the request by either method: were it
        // to pass the request on to a later route by the overriding method alone, that route would
        // strip the header and its upstream would run the request line's method unprotected.
        if (
          entry.methods !== null &&
          !entry.methods.has(method) &&
          !(overrides && entry.methods.has(request.method))
        )
          continue;
        if (entry.host !== null && entry.host !== host) continue;
        if (entry.matchPath(path)) return { route: entry.route, method };
      }
      return undefined;
    },
  };
}

/**
 * Protected routes protect unsafe methods; GET/HEAD/OPTIONS only when listed with allowSafeMethods.
 * MCP routes protect POST alone.
 */
export function protectsMethod(route: RouteConfig, method: string): boolean {
  const policy = route.idempotency;
  if (policy === null) return false;
  // MCP's Streamable HTTP sends every message as a POST; GET opens a stream, DELETE ends a session.
  // A2A sends are POSTs too; its GETs and DELETEs (a task, a push config) pass through.
  if (policy.mcp || policy.a2a) return method === 'POST';
  if (!SAFE_METHODS.has(method)) return true;
  return policy.allowSafeMethods && route.match.methods?.has(method) === true;
}

export function isLenient(route: RouteConfig): boolean {
  return route.idempotency !== null && !route.match.strict;
}

/** Matches what `pattern` matches in any letter case, with or without one trailing slash. */
function compileLenient(pattern: string): PathMatcher {
  const folded = compilePathPattern(withoutTrailingSlash(pattern).toLowerCase());
  return (path) => folded(withoutTrailingSlash(path).toLowerCase());
}

/**
 * With `match.formats`, a path also matches when it is a matching path plus `.<format>` (or
 * `/.<format>`), as Rails' `(.:format)` routes it: `/refunds.json` takes `/refunds`'s route.
 */
function withFormats(route: RouteConfig, matches: PathMatcher): PathMatcher {
  const formats = route.match.formats;
  if (formats.length === 0) return matches;
  const lenient = isLenient(route);
  const suffix = new RegExp(`\\.(?:${formats.join('|')})$`, lenient ? 'i' : '');
  return (path) => {
    if (matches(path)) return true;
    const bare = lenient ? withoutTrailingSlash(path) : path;
    const found = suffix.exec(bare);
    if (found === null) return false;
    const named = bare.slice(0, found.index);
    return named !== '' && named !== '/' && matches(withoutTrailingSlash(named));
  };
}

function withoutTrailingSlash(path: string): string {
  return path.length > 1 && path.endsWith('/') ? path.slice(0, -1) : path;
}

/**
 * The path and query sent upstream: stripPrefix removed (in any letter case where the route matched
 * leniently), the upstream's base path prepended. Undefined if the result would leave the base path
 * or hold a dot segment, which a canonical path cannot do: this is the last check before the
 * upstream, not the only one.
 */
export function upstreamPath(
  route: RouteConfig,
  target: { readonly path: string; readonly query: string },
): string | undefined {
  let path = target.path;
  const strip = route.stripPrefix;
  if (strip !== null) {
    const lenient = isLenient(route);
    const head = lenient ? path.slice(0, strip.length).toLowerCase() : path.slice(0, strip.length);
    const prefix = lenient ? strip.toLowerCase() : strip;
    if (head === prefix && (path.length === strip.length || path[strip.length] === '/')) {
      path = path.slice(strip.length) || '/';
    } else if (path.includes(';')) {
      path = stripParameterisedPrefix(path, prefix, lenient) ?? path;
    }
  }
  const base = route.upstream.basePath;
  if (base) path = path === '/' ? base : `${base}${path}`;
  if (base && path !== base && !path.startsWith(`${base}/`)) return undefined;
  if (DOT_SEGMENT.test(path)) return undefined;
  return target.query ? `${path}?${target.query}` : path;
}

const DOT_SEGMENT = /(?:^|\/)\.\.?(?:\/|$)/;

/**
 * A path routed by its servlet reading (";…" removed) loses the prefix's segments with their
 * parameters: `/mail;v=1/emails` under stripPrefix `/mail` is forwarded as `/emails`.
 */
function stripParameterisedPrefix(
  path: string,
  prefix: string,
  lenient: boolean,
): string | undefined {
  const want = prefix.split('/');
  const got = path.split('/');
  if (got.length < want.length) return undefined;
  for (let i = 1; i < want.length; i++) {
    const segment = got[i]!;
    const semicolon = segment.indexOf(';');
    const bare = semicolon === -1 ? segment : segment.slice(0, semicolon);
    if ((lenient ? bare.toLowerCase() : bare) !== want[i]) return undefined;
  }
  return `/${got.slice(want.length).join('/')}`;
}
