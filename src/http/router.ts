// Matches a request to the first route whose method, host and path match (config order). Path
// patterns are compiled once: exact (`/refunds`), parameters (`/orders/:id/refund`), or a prefix
// (`/mail/**`, which also matches `/mail` itself; `/**` matches everything).
import type { RouteConfig } from '../config/types';

export interface RequestTarget {
  /** Raw path as sent, without the query; never empty. */
  readonly path: string;
  /** Raw query string without '?', '' if none. */
  readonly query: string;
}

export interface Router {
  match(method: string, host: string | undefined, path: string): RouteConfig | undefined;
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
    matchPath: compilePathPattern(route.match.path),
  }));
  return {
    match(method, host, path) {
      const hostName = host === undefined ? undefined : stripPort(host).toLowerCase();
      for (const entry of compiled) {
        if (entry.methods !== null && !entry.methods.has(method)) continue;
        if (entry.host !== null && entry.host !== hostName) continue;
        if (entry.matchPath(path)) return entry.route;
      }
      return undefined;
    },
  };
}

/** Splits origin-form (`/a?b`) or absolute-form (`http://h/a?b`) request targets. */
export function parseRequestTarget(url: string): RequestTarget {
  let target = url;
  if (!target.startsWith('/')) {
    const schemeEnd = target.indexOf('://');
    if (schemeEnd !== -1) {
      const pathStart = target.indexOf('/', schemeEnd + 3);
      target = pathStart === -1 ? '/' : target.slice(pathStart);
    } else if (target === '*') {
      target = '*';
    } else {
      target = `/${target}`;
    }
  }
  const q = target.indexOf('?');
  if (q === -1) return { path: target, query: '' };
  return { path: target.slice(0, q) || '/', query: target.slice(q + 1) };
}

/** The path sent upstream: stripPrefix removed, the upstream's base path prepended. */
export function upstreamPath(route: RouteConfig, target: RequestTarget): string {
  let path = target.path;
  const strip = route.stripPrefix;
  if (
    strip !== null &&
    (path === strip || path.startsWith(strip.endsWith('/') ? strip : `${strip}/`))
  ) {
    path = path.slice(strip.length);
    if (!path.startsWith('/')) path = `/${path}`;
  }
  const base = route.upstream.basePath;
  if (base) path = path === '/' ? base : `${base}${path}`;
  return target.query ? `${path}?${target.query}` : path;
}

function stripPort(host: string): string {
  if (host.startsWith('[')) {
    const end = host.indexOf(']');
    return end === -1 ? host : host.slice(0, end + 1);
  }
  const colon = host.indexOf(':');
  return colon === -1 ? host : host.slice(0, colon);
}
