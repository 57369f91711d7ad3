// The edge (src/http/README.md): what the proxy decides a request is — its path, host and method —
// before it routes it, so routing, protection and forwarding all read one reading of the request,
// and a request that has more than one reading is refused instead of passed on.
//
//   req ─► header lines counted (at most listen.maxRequestHeaders)
//       ─► target (canonical-target.ts) ─► host: absolute-form authority, else the one Host line
//       ─► Transfer-Encoding: chunked only ─► Connection may not name framing headers
//       ─► method-override headers read (used only on routes with methodOverride: true)
//       ─► EdgeRequest, or a ProxyError to answer with
import type { IncomingMessage } from 'node:http';
import { ProxyError } from '../errors';
import { type HeaderFacts, readHeaderFacts } from './header-lines';
import { connectionTokens } from './headers';
import {
  canonicalAuthority,
  canonicalTarget,
  hostName,
  isTargetProblem,
  type PathReadings,
  pathReadings,
} from './canonical-target';

export interface EdgeRequest {
  /** The method on the request line. */
  readonly method: string;
  readonly path: string;
  readonly query: string;
  /** Other readings of the path (";" parameters, trimmed, decoded twice); usually undefined. */
  readonly readings: PathReadings | undefined;
  /** host[:port] the client addressed, canonical; undefined only for HTTP/1.0 without Host. */
  readonly authority: string | undefined;
  /** The authority's host name, what `match.host` compares with. */
  readonly host: string | undefined;
  /**
   * The method an override header names (upper-case); undefined when none was sent, null when the
   * headers name no known method or disagree.
   */
  readonly overrideMethod: string | null | undefined;
  /** Names the Connection header lists besides keep-alive/close (usually none). */
  readonly connectionNames: readonly string[];
  /** The peer is a trusted proxy that sent forwarding headers of its own: keep them. */
  readonly keepsForwarding: boolean;
  /**
   * The raw request target's path (never its query: it may hold tokens) when it differs from the
   * canonical one, for the log.
   */
  readonly rawTarget: string | undefined;
  /** The headers every request's way reads (header-lines.ts), without building req.headers. */
  readonly headers: HeaderFacts;
}

export interface EdgeSettings {
  /** Some route matches on Host: a request without one (HTTP/1.0) cannot be routed safely. */
  readonly routesUseHost: boolean;
  readonly trustsPeer: (address: string | undefined) => boolean;
  /** listen.maxRequestHeaders: more header lines than this are refused with 431. */
  readonly maxRequestHeaders: number;
}

export const METHOD_OVERRIDE_HEADERS = [
  'x-http-method-override',
  'x-http-method',
  'x-method-override',
] as const;

export const KNOWN_METHODS: ReadonlySet<string> = new Set([
  'GET',
  'HEAD',
  'OPTIONS',
  'POST',
  'PUT',
  'PATCH',
  'DELETE',
]);

/** Headers that frame the message or address it: dropping them on the way would change both. */
const FRAMING_HEADERS: ReadonlySet<string> = new Set([
  'host',
  'content-length',
  'transfer-encoding',
]);

export function readEdge(req: IncomingMessage, settings: EdgeSettings): EdgeRequest | ProxyError {
  // Counted as sent (rawHeaders, repeated names included), before anything else is read: the
  // upstream gets these lines plus the ones the proxy adds (the key last), and an upstream at its
  // own limit refuses the request (Node: 1,000 lines) or drops the last lines, the key among them.
  const lines = req.rawHeaders.length / 2;
  if (lines > settings.maxRequestHeaders)
    return new ProxyError(
      'REQUEST_HEADERS_TOO_MANY',
      `The request has ${lines} header lines; this proxy accepts at most ${settings.maxRequestHeaders} (listen.maxRequestHeaders). Send fewer headers.`,
    );
  const url = req.url ?? '/';
  const target = canonicalTarget(url);
  if (isTargetProblem(target))
    return new ProxyError(
      target.problem === 'host' ? 'HOST_INVALID' : 'REQUEST_TARGET_INVALID',
      target.detail,
    );

  const headers = readHeaderFacts(req.rawHeaders);
  const authority = readAuthority(req, headers, target.authority, settings);
  if (authority instanceof ProxyError) return authority;

  const te = headers.transferEncoding;
  if (te !== undefined && te !== 'chunked' && !onlyChunked(te))
    return new ProxyError(
      'TRANSFER_ENCODING_UNSUPPORTED',
      `The request uses Transfer-Encoding "${te}"; the proxy takes only "chunked". Send the body with Content-Length, or chunked without other codings.`,
    );

  const connectionNames = connectionTokens(headers.connection);
  for (const name of connectionNames) {
    if (FRAMING_HEADERS.has(name))
      return new ProxyError(
        'CONNECTION_HEADER_CONFLICT',
        `The Connection header names "${name}", which frames or addresses this request and cannot be dropped on the way. Remove it from Connection.`,
      );
  }

  const keepsForwarding = headers.forwarding && settings.trustsPeer(req.socket.remoteAddress);

  const q = url.indexOf('?');
  const rawPath = q === -1 ? url : url.slice(0, q);
  return {
    method: req.method ?? 'GET',
    path: target.path,
    query: target.query,
    readings: pathReadings(target.path),
    authority,
    host: authority === undefined ? undefined : hostName(authority),
    overrideMethod: readOverride(headers.overrides),
    connectionNames,
    keepsForwarding,
    rawTarget: rawPath === target.path ? undefined : rawPath,
    headers,
  };
}

/** RFC 9112 §3.2: one Host line, required on HTTP/1.1; an absolute-form authority wins over it. */
function readAuthority(
  req: IncomingMessage,
  headers: HeaderFacts,
  fromTarget: string | undefined,
  settings: EdgeSettings,
): string | undefined | ProxyError {
  const lines = headers.hostLines;
  if (lines > 1)
    return new ProxyError(
      'HOST_INVALID',
      `The request has ${lines} Host headers; send exactly one, naming the proxy's host.`,
    );
  if (lines === 0) {
    if (req.httpVersionMajor > 1 || (req.httpVersionMajor === 1 && req.httpVersionMinor >= 1))
      return new ProxyError(
        'HOST_INVALID',
        'The request has no Host header, which HTTP/1.1 requires; send the host name you reached the proxy at.',
      );
    if (fromTarget !== undefined) return fromTarget;
    if (settings.routesUseHost)
      return new ProxyError(
        'HOST_INVALID',
        "The request has no Host header and this proxy routes by host; send HTTP/1.1 or add a Host header naming the proxy's host.",
      );
    return undefined;
  }
  const host = canonicalAuthority(headers.host ?? '');
  if (typeof host !== 'string') return new ProxyError('HOST_INVALID', host.detail);
  return fromTarget ?? host;
}

/** `identity, chunked` and the like: chunked last, nothing but identity before it. */
function onlyChunked(value: string): boolean {
  const codings = value
    .toLowerCase()
    .split(',')
    .map((coding) => coding.trim())
    .filter((coding) => coding !== '' && coding !== 'identity');
  return codings.length === 1 && codings[0] === 'chunked';
}

/** `overrides`: every value of the override headers, joined with ",". */
function readOverride(overrides: string | undefined): string | null | undefined {
  if (overrides === undefined) return undefined;
  let method: string | undefined;
  for (const item of overrides.split(',')) {
    const named = item.trim().toUpperCase();
    if (!KNOWN_METHODS.has(named) || (method !== undefined && method !== named)) return null;
    method = named;
  }
  return method;
}
