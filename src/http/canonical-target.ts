// The canonical form of a request target: one spelling of the path and the authority,
// decided before routing and forwarded as decided, so the route the proxy picks and the endpoint the
// upstream runs cannot differ. Pure: strings in, strings (or a reason to refuse) out.
//
//   raw target ─► split (origin-form /p?q, or absolute-form http://host/p?q)
//              ─► path: decode %XX of unreserved chars, uppercase other %XX, percent-encode bytes
//                       outside RFC 3986's path characters, merge "//", remove dot segments
//              ─► refuse: %2F %5C %00 \ # or a broken %XX (an upstream would read them its own way)
//
// The query is kept byte for byte: upstreams parse it as they like, and nothing routes on it.
import { rememberLast } from '../remember-last';

export interface CanonicalTarget {
  /** Canonical path, always starting with "/". */
  readonly path: string;
  /** Query without "?", as sent; '' when none. */
  readonly query: string;
  /** The authority of an absolute-form target (canonicalised like a Host header); else undefined. */
  readonly authority: string | undefined;
}

/** Why a target is refused; the detail tells the client what to send instead. */
export interface TargetProblem {
  readonly problem: 'target' | 'host';
  readonly detail: string;
}

/** Unreserved (RFC 3986 §2.3), sub-delims, ":" and "@": what a path segment holds unencoded. */
const PCHAR = new Uint8Array(128);
for (const c of "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~!$&'()*+,;=:@")
  PCHAR[c.charCodeAt(0)] = 1;
const UNRESERVED = new Uint8Array(128);
for (const c of 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~')
  UNRESERVED[c.charCodeAt(0)] = 1;
const HEX = '0123456789ABCDEF';

/**
 * Paths that are already canonical: "/" or segments of plain path characters, none "." or ".."
 * (with or without ";…" parameters), no "//", an optional trailing "/". Almost every request takes
 * only this test.
 */
const CANONICAL_PATH = /^(?:\/(?!\.\.?(?:[/;]|$))[A-Za-z0-9\-._~!$&'()*+,;=:@]+)*\/?$/;

/**
 * Splits and canonicalises a request target as Node's parser hands it over (req.url). A client's
 * repeats (an agent's retries, its next call of the same tool) carry the target the request before
 * did, so the last answer is kept: reading a target again was ~1.5k instructions of a cached
 * replay's ~95k (callgrind).
 */
export const canonicalTarget: (raw: string) => CanonicalTarget | TargetProblem =
  rememberLast(readTarget);

function readTarget(raw: string): CanonicalTarget | TargetProblem {
  if (raw.includes('#'))
    return refuse('a "#" fragment: fragments are never sent to a server; drop it');
  if (raw.includes('\0')) return refuse('a NUL character');
  let rest = raw;
  let authority: string | undefined;
  if (!raw.startsWith('/')) {
    const absolute = /^https?:\/\/([^/?]*)/i.exec(raw);
    if (absolute === null)
      return refuse('a request target that is neither a path ("/…") nor an http(s):// URL');
    const host = canonicalAuthority(absolute[1]!);
    if (typeof host !== 'string') return host;
    authority = host;
    rest = raw.slice(absolute[0].length);
    if (rest === '' || rest.startsWith('?')) rest = `/${rest}`;
  }
  const q = rest.indexOf('?');
  const rawPath = q === -1 ? rest : rest.slice(0, q);
  const query = q === -1 ? '' : rest.slice(q + 1);
  const path = canonicalPath(rawPath);
  if (typeof path !== 'string') return path;
  return { path, query, authority };
}

/** The canonical spelling of a path that starts with "/", or why it is refused. */
export function canonicalPath(raw: string): string | TargetProblem {
  if (CANONICAL_PATH.test(raw)) return raw;
  let decoded = '';
  for (let i = 0; i < raw.length; i++) {
    const code = raw.charCodeAt(i);
    if (code === 0x25 /* % */) {
      const high = hexValue(raw.charCodeAt(i + 1));
      const low = hexValue(raw.charCodeAt(i + 2));
      if (high < 0 || low < 0)
        return refuse(`a broken percent-encoding at "${raw.slice(i, i + 3)}" in the path`);
      const byte = high * 16 + low;
      if (byte === 0x2f || byte === 0x5c)
        return refuse(
          `an encoded ${byte === 0x2f ? 'slash (%2F)' : 'backslash (%5C)'} in the path: upstreams disagree on whether it separates segments`,
        );
      if (byte === 0) return refuse('an encoded NUL (%00) in the path');
      decoded +=
        byte < 128 && UNRESERVED[byte] === 1
          ? String.fromCharCode(byte)
          : `%${HEX[high]}${HEX[low]}`;
      i += 2;
    } else if (code === 0x5c /* \ */) {
      return refuse('a backslash in the path: some upstreams read it as "/"');
    } else if (code === 0x2f || (code < 128 && PCHAR[code] === 1)) {
      decoded += raw[i];
    } else {
      // Node hands the target over as latin1: every char is one byte of what the client sent.
      const byte = code & 0xff;
      decoded += `%${HEX[byte >> 4]}${HEX[byte & 15]}`;
    }
  }
  return removeDotSegments(decoded);
}

/**
 * Merges empty segments ("//") and resolves "." and ".." (RFC 3986 §5.2.4); a ".." above the root
 * is dropped. A final "/", ".", or ".." leaves a trailing slash, as in the RFC. A segment that is
 * "." or ".." once its ";…" parameters are removed ("..;x") is a dot segment too: servlet
 * containers read "/x/..;/refunds" as "/refunds".
 */
function removeDotSegments(path: string): string {
  const segments = path.split('/');
  const out: string[] = [];
  let trailingSlash = false;
  for (let i = 1; i < segments.length; i++) {
    let segment = segments[i]!;
    const semicolon = segment.indexOf(';');
    if (semicolon === 1 || semicolon === 2) {
      const bare = segment.slice(0, semicolon);
      if (bare === '.' || bare === '..') segment = bare;
    }
    if (segment === '..') out.pop();
    else if (segment !== '' && segment !== '.') out.push(segment);
    if (i === segments.length - 1)
      trailingSlash = segment === '' || segment === '.' || segment === '..';
  }
  return `/${out.join('/')}${trailingSlash && out.length > 0 ? '/' : ''}`;
}

/**
 * The readings of a canonical path that upstreams other than a plain RFC 3986 one take, each
 * canonical itself; undefined fields where a reading is the path as sent. Most paths have none:
 * only a ";" or a "%" can make one.
 */
export interface PathReadings {
  /** ";…" removed from every segment, as Tomcat and Spring read a path (then dot segments again). */
  readonly servlet: string | undefined;
  /**
   * Readings of upstreams that trim whitespace from path segments (Spring's trimTokens, a
   * `strip()` in a handler) or decode the path a second time (`%252F` → `/`).
   */
  readonly suspect: readonly string[];
}

const NO_READINGS: readonly string[] = [];

/** A canonical path's other readings (see PathReadings), or undefined when it has none. */
export function pathReadings(path: string): PathReadings | undefined {
  const semicolon = path.includes(';');
  if (!semicolon && !path.includes('%')) return undefined;
  const servlet = semicolon ? withoutParameters(path) : undefined;
  // Each reading of each reading: an upstream that decodes twice may trim too (`/or%2564ers/1/x%20`
  // is `/orders/1/x` only to both). Every step shortens the path, so this ends.
  const suspect: string[] = [];
  const pending = servlet === undefined || servlet === path ? [path] : [path, servlet];
  for (let base = pending.pop(); base !== undefined; base = pending.pop()) {
    for (const reading of [trimmed(base), decodedTwice(base)]) {
      if (
        reading === undefined ||
        reading === path ||
        reading === servlet ||
        suspect.includes(reading)
      )
        continue;
      suspect.push(reading);
      pending.push(reading);
    }
  }
  if ((servlet === undefined || servlet === path) && suspect.length === 0) return undefined;
  return {
    servlet: servlet === path ? undefined : servlet,
    suspect: suspect.length === 0 ? NO_READINGS : suspect,
  };
}

function withoutParameters(path: string): string {
  return removeDotSegments(path.replace(/;[^/]*/g, ''));
}

/** Escaped whitespace and control bytes (%01–%20, canonical upper case) at either end of a segment. */
const SEGMENT_WHITESPACE = /(?<=\/)(?:%(?:[01][0-9A-F]|20))+|(?:%(?:[01][0-9A-F]|20))+(?=\/|$)/g;

function trimmed(path: string): string | undefined {
  if (!path.includes('%')) return undefined;
  const trimmedPath = path.replace(SEGMENT_WHITESPACE, '');
  return trimmedPath === path ? undefined : removeDotSegments(trimmedPath);
}

const DOUBLE_ENCODED = /%25([0-9A-Fa-f]{2})/g;

/** The path decoded once more: `%252F` is a "/" to an upstream that decodes twice. */
function decodedTwice(path: string): string | undefined {
  if (!path.includes('%25')) return undefined;
  const once = path.replace(DOUBLE_ENCODED, (_, hex: string) => {
    const byte = parseInt(hex, 16);
    return byte === 0x2f || byte === 0x5c ? '/' : `%${hex}`;
  });
  if (once === path) return undefined;
  const reading = canonicalPath(once);
  // A second reading that holds a NUL or a broken escape reaches no route of ours: nothing to
  // match.
  return typeof reading === 'string' ? reading : undefined;
}

const REG_NAME_LABEL = /^[a-z0-9_~!$&'()*+,;=-]+$/;
const IPV6_LITERAL = /^\[[0-9a-f:.]+\]$/;

/**
 * A Host header value or absolute-form authority as host[:port], lower-case, one trailing dot
 * removed (`API.local.:8080` → `api.local:8080`), or why it is refused: userinfo, empty labels,
 * percent-encoding or any character a host name does not have.
 */
export const canonicalAuthority: (raw: string) => string | TargetProblem =
  // Nearly every request of a deployment carries the same Host: the last answer is kept.
  rememberLast(readAuthority);

function readAuthority(raw: string): string | TargetProblem {
  const value = raw.toLowerCase();
  let host = value;
  let port = '';
  const colon = value.lastIndexOf(':');
  if (colon !== -1 && !value.slice(colon).includes(']')) {
    host = value.slice(0, colon);
    port = value.slice(colon);
    if (!/^:\d{0,5}$/.test(port)) return badHost(raw);
    if (port === ':') port = '';
  }
  if (host.startsWith('[')) return IPV6_LITERAL.test(host) ? host + port : badHost(raw);
  if (host.endsWith('.')) host = host.slice(0, -1);
  if (host === '') return badHost(raw);
  for (const label of host.split('.')) if (!REG_NAME_LABEL.test(label)) return badHost(raw);
  return host + port;
}

/** The host name of a canonical authority, without its port: what `match.host` compares with. */
export function hostName(authority: string): string {
  if (authority.startsWith('[')) return authority.slice(0, authority.indexOf(']') + 1);
  const colon = authority.indexOf(':');
  return colon === -1 ? authority : authority.slice(0, colon);
}

export function isTargetProblem(value: unknown): value is TargetProblem {
  return typeof value === 'object' && value !== null && 'problem' in value;
}

function refuse(what: string): TargetProblem {
  return {
    problem: 'target',
    detail: `The request target has ${what}. Send the path in its plain form (percent-encode only what must be).`,
  };
}

function badHost(raw: string): TargetProblem {
  return {
    problem: 'host',
    detail: `The host ${JSON.stringify(raw)} is not a valid host name (with an optional port). Send the proxy's host name in the Host header.`,
  };
}

function hexValue(code: number): number {
  if (code >= 0x30 && code <= 0x39) return code - 0x30;
  const lower = code | 0x20;
  if (lower >= 0x61 && lower <= 0x66) return lower - 0x61 + 10;
  return -1;
}
