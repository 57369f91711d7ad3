// Header sets compiled once: hop-by-hop headers (RFC 9110 §7.6.1) are never forwarded nor stored,
// and the X-Forwarded-* headers every forwarded request carries.
import type { IncomingMessage } from 'node:http';
import type { TLSSocket } from 'node:tls';

/** Header pairs in upstream order; repeated names stay repeated. */
export type HeaderPairs = readonly (readonly [string, string])[];

export const HOP_BY_HOP: ReadonlySet<string> = new Set([
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

/**
 * Hop-by-hop names for this message: the fixed set plus any named in its Connection header (an
 * array when a parser kept repeated Connection lines apart, as undici's does).
 */
export function hopByHopNames(headers: {
  readonly connection?: string | readonly string[] | undefined;
}): ReadonlySet<string> {
  const listed = connectionTokens(headers.connection);
  // The usual values name nothing beyond the fixed set: no new set on the common path.
  let names: Set<string> | undefined;
  for (const name of listed) {
    if (HOP_BY_HOP.has(name)) continue;
    names ??= new Set(HOP_BY_HOP);
    names.add(name);
  }
  return names ?? HOP_BY_HOP;
}

const NO_TOKENS: readonly string[] = [];

/**
 * The header names a Connection header lists (lower-case; `close` and `keep-alive` left out), from
 * one value or the repeated lines undici keeps apart. Usually none: no parsing for the usual
 * values.
 */
export function connectionTokens(
  connection: string | readonly string[] | undefined,
): readonly string[] {
  if (!connection || connection === 'keep-alive' || connection === 'close') return NO_TOKENS;
  const listed = typeof connection === 'string' ? connection : connection.join(',');
  const names: string[] = [];
  for (const token of listed.split(',')) {
    const name = token.trim().toLowerCase();
    if (name !== '' && name !== 'close' && name !== 'keep-alive') names.push(name);
  }
  return names;
}

export interface ForwardedHeaders {
  'x-forwarded-for': string;
  'x-forwarded-proto': string;
  'x-forwarded-host': string;
}

/** What the X-Forwarded-* headers are made from: the edge's reading of the request (edge.ts). */
export interface ForwardingFacts {
  /** host[:port] the client addressed, canonical. */
  readonly authority: string;
  /** The peer is a trusted proxy: its X-Forwarded-Host/-Proto (and Forwarded) stand. */
  readonly keepsForwarding: boolean;
  readonly keepsOverride: boolean;
}

/**
 * Appends the peer to X-Forwarded-For; X-Forwarded-Proto and -Host are this hop's, unless the peer
 * is a trusted proxy that sent its own (trustedProxies). Anyone else could name any host or scheme,
 * and upstreams build redirects and absolute links from them.
 */
export function forwardedHeaders(req: IncomingMessage, facts: ForwardingFacts): ForwardedHeaders {
  const headers = req.headers;
  const client = req.socket.remoteAddress ?? '';
  const priorFor = headers['x-forwarded-for'];
  const proto = (req.socket as TLSSocket).encrypted === true ? 'https' : 'http';
  return {
    'x-forwarded-for': priorFor ? `${priorFor}, ${client}` : client,
    'x-forwarded-proto':
      (facts.keepsForwarding && firstValue(headers['x-forwarded-proto'])) || proto,
    'x-forwarded-host':
      (facts.keepsForwarding && firstValue(headers['x-forwarded-host'])) || facts.authority,
  };
}

/**
 * Request headers the edge decides about (src/http/README.md): `Forwarded` is kept only from a
 * trusted proxy, the method-override headers only on routes that honour them. One set lookup per
 * header.
 */
export const EDGE_HEADERS: ReadonlySet<string> = new Set([
  'forwarded',
  'x-http-method-override',
  'x-http-method',
  'x-method-override',
]);

/** For a name in EDGE_HEADERS: does it go upstream? */
export function keepsEdgeHeader(name: string, facts: ForwardingFacts): boolean {
  return name === 'forwarded' ? facts.keepsForwarding : facts.keepsOverride;
}

function firstValue(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}
