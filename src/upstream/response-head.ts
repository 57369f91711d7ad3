// A pass-through answer's head as the client gets it: the upstream's header lines as they came
// (repeated ones stay repeated, names keep their spelling), less the hop-by-hop ones and those its
// Connection header names, and our own hop's Connection.
//
// undici hands the lines over as Buffers. Decoded one by one, each was a call into C++: with the
// lower-casing and set lookups of every name, ~16k instructions of a pass-through's ~205k
// (callgrind), more than undici's own parse of the same head. They are views of the socket read
// they arrived in, so the span they cover is decoded once and each line cut from it, and a name is
// lower-cased only when its length is one a name this file looks for has.
import type http from 'node:http';
import type { Dispatcher } from 'undici';
import { connectionTokens, HOP_BY_HOP } from '../http/headers';

export interface ResponseHead {
  readonly headers: string[];
  /** Content-Type text/event-stream. */
  readonly eventStream: boolean;
}

/**
 * The answer's header list as it came ([name, value, name, value, …]); undici keeps it on the
 * controller for HTTP/1.1. Should it hold only the parsed object, the list is made from that.
 */
export function rawHeaderList(
  raw: Dispatcher.DispatchController['rawHeaders'],
  parsed: http.IncomingHttpHeaders,
): readonly (Buffer | string)[] {
  if (Array.isArray(raw)) return raw;
  return Object.entries(raw ?? parsed).flatMap(([name, value]) =>
    value === undefined ? [] : (Array.isArray(value) ? value : [value]).flatMap((v) => [name, v]),
  );
}

/** The head for the client; `keepAlive`: our hop's connection stays open. */
export function responseHeaders(
  raw: readonly (Buffer | string)[],
  keepAlive: boolean,
): ResponseHead {
  const lines = headerStrings(raw);
  const headers: string[] = [];
  let connection: string[] | undefined;
  let eventStream = false;
  for (let i = 0; i < lines.length; i += 2) {
    const name = lines[i]!;
    const value = lines[i + 1]!;
    const looked = LOOKED_AT[name.length];
    const lower = looked === undefined ? undefined : name.toLowerCase();
    if (lower === undefined || !looked!.includes(lower)) headers.push(name, value);
    else if (lower === 'connection') (connection ??= []).push(value);
    else if (lower === 'content-type') {
      headers.push(name, value);
      // Most types are application/…: no regular expression for them.
      if (!value.startsWith('application/')) eventStream = /^\s*text\/event-stream/i.test(value);
    }
    // Any other is hop-by-hop: not for the client.
  }
  // One line is the usual `keep-alive` or `close`, which connectionTokens knows without parsing.
  const listed = connectionTokens(connection?.length === 1 ? connection[0] : connection);
  if (listed.length > 0) {
    for (let i = headers.length - 2; i >= 0; i -= 2) {
      if (listed.includes(headers[i]!.toLowerCase())) headers.splice(i, 2);
    }
  }
  headers.push('connection', keepAlive ? 'keep-alive' : 'close');
  return { headers, eventStream };
}

/**
 * The names this file looks for (the hop-by-hop ones and Content-Type) by length: a name of a length
 * none of them has is none of them, and is not lower-cased. Set lookups of the lower-cased names
 * hashed each (~700 instructions a lookup, callgrind); a list of one or two compares for less.
 * A name a Connection header lists is looked for apart.
 */
const LOOKED_AT = (() => {
  const byLength: (string[] | undefined)[] = [];
  for (const name of [...HOP_BY_HOP, 'content-type']) (byLength[name.length] ??= []).push(name);
  return byLength as readonly (readonly string[] | undefined)[];
})();

/**
 * The lines as latin1 strings (the bytes of a header, one character each, as Node reads them).
 * Views of one ArrayBuffer are decoded as the one span they cover, when that span holds little
 * else; anything else line by line.
 */
export function headerStrings(raw: readonly (Buffer | string)[]): readonly string[] {
  const first = raw[0];
  if (first === undefined || typeof first === 'string') return raw.map(latin1);
  const memory = first.buffer;
  let start = first.byteOffset;
  let end = start;
  let bytes = 0;
  for (const line of raw) {
    if (typeof line === 'string' || line.buffer !== memory) return raw.map(latin1);
    if (line.byteOffset < start) start = line.byteOffset;
    if (line.byteOffset + line.length > end) end = line.byteOffset + line.length;
    bytes += line.length;
  }
  // Between the lines: ": " and CRLF, a few bytes each. A span much longer than its lines is not a
  // head read in one go, and decoding it whole would cost more than it saves.
  if (end - start > 2 * bytes + 4 * raw.length) return raw.map(latin1);
  const text = Buffer.from(memory, start, end - start).toString('latin1');
  const lines = new Array<string>(raw.length);
  for (let i = 0; i < raw.length; i++) {
    const line = raw[i] as Buffer;
    const at = line.byteOffset - start;
    lines[i] = text.slice(at, at + line.length);
  }
  return lines;
}

function latin1(text: Buffer | string): string {
  return typeof text === 'string' ? text : text.toString('latin1');
}
