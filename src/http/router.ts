// Matches a request to the first route whose method, host and path match (config order). Path
// patterns are compiled once: exact (`/refunds`), parameters (`/orders/:id/refund`), or a prefix
// (`/mail/**`, which also matches `/mail` itself; `/**` matches everything). Protected routes match
// leniently (SPEC §8): with a trailing slash and in any letter case, as Express and many frameworks
// route, so no spelling the upstream would take for the protected endpoint slips past to a
// pass-through route. The router only ever sees canonical paths (edge.ts).
import type { RouteConfig } from '../config/types';
import type { EdgeRequest } from './edge';

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
    matchPath: isLenient(route)
      ? compileLenient(route.match.path)
      : compilePathPattern(route.match.path),
  }));
  return {
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

export function isLenient(route: RouteConfig): boolean {
  return route.idempotency !== null && !route.match.strict;
}

/** Matches what `pattern` matches in any letter case, with or without one trailing slash. */
function compileLenient(pattern: string): PathMatcher {
  const folded = compilePathPattern(withoutTrailingSlash(pattern).toLowerCase());
  return (path) => folded(withoutTrailingSlash(path).toLowerCase());
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
    }
  }
  const base = route.upstream.basePath;
  if (base) path = path === '/' ? base : `${base}${path}`;
  if (base && path !== base && !path.startsWith(`${base}/`)) return undefined;
  if (DOT_SEGMENT.test(path)) return undefined;
  return target.query ? `${path}?${target.query}` : path;
}

const DOT_SEGMENT = /(?:^|\/)\.\.?(?:\/|$)/;
