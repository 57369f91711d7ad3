// Header sets compiled once: hop-by-hop headers (RFC 9110 §7.6.1) are never forwarded nor stored,
// and the X-Forwarded-* headers every forwarded request carries.
import type { IncomingMessage } from 'node:http';
import type { TLSSocket } from 'node:tls';

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
  const connection = headers.connection;
  // The usual values name nothing beyond the fixed set: no parsing, no new set on the common path.
  if (!connection || connection === 'keep-alive' || connection === 'close') return HOP_BY_HOP;
  const listed = typeof connection === 'string' ? connection : connection.join(',');
  let names: Set<string> | undefined;
  for (const token of listed.split(',')) {
    const name = token.trim().toLowerCase();
    if (!name || name === 'close' || HOP_BY_HOP.has(name)) continue;
    names ??= new Set(HOP_BY_HOP);
    names.add(name);
  }
  return names ?? HOP_BY_HOP;
}

export interface ForwardedHeaders {
  'x-forwarded-for': string;
  'x-forwarded-proto': string;
  'x-forwarded-host': string;
}

/** Appends the client address to X-Forwarded-For; keeps an incoming proto/host, else this hop's. */
export function forwardedHeaders(req: IncomingMessage): ForwardedHeaders {
  const headers = req.headers;
  const client = req.socket.remoteAddress ?? '';
  const priorFor = headers['x-forwarded-for'];
  const encrypted = (req.socket as TLSSocket).encrypted === true;
  return {
    'x-forwarded-for': priorFor ? `${priorFor}, ${client}` : client,
    'x-forwarded-proto': firstValue(headers['x-forwarded-proto']) ?? (encrypted ? 'https' : 'http'),
    'x-forwarded-host': firstValue(headers['x-forwarded-host']) ?? headers.host ?? '',
  };
}

function firstValue(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}
