// Writing responses the proxy assembled itself: upstream answers it buffered, and stored ones it
// replays. Header pairs keep the upstream's order and repeated names; framing headers are ours.
import type { ServerResponse } from 'node:http';
import { type HeaderPairs, hopByHopNames } from './headers';

/** Upstream response headers as pairs, without hop-by-hop or framing headers. */
export function responseHeaderPairs(
  headers: Record<string, string | string[] | undefined>,
  options: { keepSetCookie: boolean },
): [string, string][] {
  const hop = hopByHopNames(headers);
  const pairs: [string, string][] = [];
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || name === 'content-length' || hop.has(name)) continue;
    if (name === 'set-cookie' && !options.keepSetCookie) continue;
    if (Array.isArray(value)) for (const item of value) pairs.push([name, item]);
    else pairs.push([name, value]);
  }
  return pairs;
}

/** 1xx, 204 and 304 answers carry no body and no Content-Length (RFC 9110 §8.6). */
export function statusHasBody(status: number): boolean {
  return status >= 200 && status !== 204 && status !== 304;
}

/** Writes a complete response in one go; `extra` headers are appended after the stored ones. */
export function writeWhole(
  res: ServerResponse,
  status: number,
  headers: HeaderPairs,
  body: Buffer,
  extra: HeaderPairs = [],
): void {
  if (res.destroyed) return;
  const flat: string[] = [];
  for (const [name, value] of headers) flat.push(name, value);
  for (const [name, value] of extra) flat.push(name, value);
  if (statusHasBody(status)) flat.push('content-length', String(body.length));
  res.writeHead(status, flat);
  res.end(statusHasBody(status) ? body : undefined);
}

/** Writes a complete response whose head is ready as writeHead takes it, Content-Length included. */
export function writeFlat(
  res: ServerResponse,
  status: number,
  flat: readonly string[],
  body: Buffer,
): void {
  if (res.destroyed) return;
  // writeHead only reads the list: one list serves every replay of an answer.
  res.writeHead(status, flat as string[]);
  res.end(statusHasBody(status) ? body : undefined);
}

/**
 * True when an answer can no longer be written whole (its head already went, or the client left):
 * the connection is destroyed instead, so the client sees a cut, never a second head.
 */
export function tooLateToAnswer(res: ServerResponse): boolean {
  if (!res.headersSent && !res.destroyed) return false;
  res.destroy();
  return true;
}
