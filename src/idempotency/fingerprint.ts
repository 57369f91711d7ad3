// The request fingerprint: SHA-256 over the parts a route lists, so a key reused with a different
// request is answered 422 instead of replaying someone else's response
// (README.md#what-a-client-sees-on-a-protected-route).
//
// Framing: the hash input is a sequence of fields, each an 8-byte big-endian byte length followed
// by the bytes. It opens with a domain field ("idempotency-proxy/fingerprint/v1"), then each part
// in policy order as a tag field naming the part followed by its fields:
//
//   method        "method", METHOD (upper-case)
//   path          "path", path as received (not percent-decoded)
//   query         "query", pair count, then name and value of each pair (canonical order, below)
//   body          "body", mode ("json" | "bytes"), content (canonical JSON | raw bytes)
//   raw-body      "raw-body", the bytes as sent, whatever the content type (a UCP profile's)
//   body-field    "body-field", segment count, segments..., then "absent" | "json", canonical JSON
//   header        "header", name, then "absent" | "present", value count, values...
//   query-param   "query-param", name, then "absent" | "present", value count, values...
//
// Because every field is length-prefixed and every variable list is counted, two different inputs
// can never frame to the same bytes: path '/a' + query 'b' cannot collide with path '/ab', an
// empty header differs from a missing one, and a JSON body differs from the same text sent as
// bytes (the mode field). Part names are hashed too, so the input is self-describing.

import { hash } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import type { FingerprintPolicy, RequestPart } from '../config/types';
import { canonicalize, canonicalizeAt, parseJson, type ParsedJson } from './canonical-json';

export interface FingerprintInput {
  method: string;
  path: string;
  /** Raw query string without '?', '' if none. */
  query: string;
  /** Node's request headers (lower-case names). */
  headers: IncomingHttpHeaders;
  body: Buffer;
  contentType: string | undefined;
}

type IgnorePaths = FingerprintPolicy['ignore'];

/** The 32-byte SHA-256 fingerprint of a request under a route's policy. */
export function computeFingerprint(input: FingerprintInput, policy: FingerprintPolicy): Buffer {
  return hashRequestParts('fingerprint/v1', policy.parts, input, policy.ignore);
}

/**
 * Names a fingerprint policy (config/types.ts fingerprintEpoch): a short digest of everything the
 * fingerprint of a request depends on besides the request — the parts and ignored fields, or on an
 * MCP route (`mcpIgnore` set) the arguments it leaves out — and the framing's version.
 */
export function fingerprintEpoch(
  policy: FingerprintPolicy,
  mcpIgnore?: readonly (readonly string[])[],
): string {
  const described = JSON.stringify({
    v: 'fingerprint/v1',
    parts: policy.parts,
    ignore: policy.ignore,
    mcp: mcpIgnore ?? null,
  });
  return hash('sha256', described, 'base64url').slice(0, 16);
}

/**
 * SHA-256 over the given parts, framed as described at the top of this file, under a domain
 * name that keeps different uses (fingerprints, derived keys) from ever sharing a hash.
 */
export function hashRequestParts(
  domain: string,
  parts: readonly RequestPart[],
  input: FingerprintInput,
  ignore: IgnorePaths,
): Buffer {
  const framed = new FramedHash(domain);
  const body = new LazyJsonBody(input.body);
  for (const part of parts) writePart(framed, part, input, body, ignore);
  return framed.digest();
}

/**
 * A SHA-256 over length-prefixed fields; see the framing notes at the top of this file. The fields
 * are framed into one buffer and hashed in one call: a dozen small hash.update() calls, each a trip
 * into native code, cost more than the hashing itself.
 */
export class FramedHash {
  private readonly values: (string | Buffer)[] = [];
  private readonly lengths: number[] = [];
  private total = 0;

  /** `domain` undefined: no domain field, for a piece of framing that others are joined to. */
  constructor(domain?: string) {
    if (domain !== undefined) this.field(`idempotency-proxy/${domain}`);
  }

  field(value: string | Buffer): this {
    const length = typeof value === 'string' ? utf8Length(value) : value.length;
    this.values.push(value);
    this.lengths.push(length);
    this.total += 8 + length;
    return this;
  }

  /** A list of values with its count first, so ['a', 'b'] and ['ab'] differ. */
  list(values: readonly (string | Buffer)[]): this {
    this.field(String(values.length));
    for (const value of values) this.field(value);
    return this;
  }

  /** "absent", or "present" and the values: a missing header differs from an empty one. */
  optionalList(values: readonly (string | Buffer)[] | undefined): this {
    if (values === undefined) return this.field('absent');
    return this.field('present').list(values);
  }

  /** A part of the request that is not read from its body (the raw fingerprint's). */
  part(part: RequestPart, input: FingerprintInput, ignore: IgnorePaths): this {
    writePart(this, part, input, NO_BODY, ignore);
    return this;
  }

  digest(): Buffer {
    // One-shot: a Hash object per call cost more than the hashing of a small request. Taken as a
    // latin1 ('binary') string and copied into a Buffer from Node's pool: a Buffer made by native
    // code gets an ArrayBuffer of its own, which cost more than the hash (1.1 µs against 0.45 for
    // 104 bytes).
    return Buffer.from(hash('sha256', this.framed(), 'binary'), 'latin1');
  }

  /** The framed fields themselves, as digest() hashes them. */
  framed(): Buffer {
    const framed = Buffer.allocUnsafe(this.total);
    let at = 0;
    for (let i = 0; i < this.values.length; i++)
      at = frameField(framed, at, this.values[i]!, this.lengths[i]!);
    return framed;
  }
}

/**
 * Writes one field at `at` (its length in bytes, `length`, as 8 bytes big-endian, then the value)
 * and returns where the next one goes.
 */
export function frameField(
  framed: Buffer,
  at: number,
  value: string | Buffer,
  length: number,
): number {
  framed.writeUInt32BE(Math.floor(length / 0x1_0000_0000), at);
  framed[at + 4] = length >>> 24;
  framed[at + 5] = (length >>> 16) & 0xff;
  framed[at + 6] = (length >>> 8) & 0xff;
  framed[at + 7] = length & 0xff;
  at += 8;
  // Most fields are a few bytes (tags, a method, a path): copied here, they skip a trip into
  // native code each, which cost more than the copy. A string as long in bytes as in UTF-16
  // units is ASCII.
  if (length > SHORT_FIELD) {
    if (typeof value === 'string') framed.write(value, at, 'utf8');
    else framed.set(value, at);
  } else if (typeof value !== 'string') {
    for (let j = 0; j < length; j++) framed[at + j] = value[j]!;
  } else if (length === value.length) {
    for (let j = 0; j < length; j++) framed[at + j] = value.charCodeAt(j);
  } else framed.write(value, at, 'utf8');
  return at + length;
}

/** Fields up to this many bytes are framed by a loop here rather than by Node's native copy. */
const SHORT_FIELD = 64;

/** A string's length in UTF-8: counted here for a short ASCII string, else by Node. */
export function utf8Length(text: string): number {
  if (text.length > SHORT_FIELD) return Buffer.byteLength(text, 'utf8');
  for (let i = 0; i < text.length; i++) {
    if (text.charCodeAt(i) >= 0x80) return Buffer.byteLength(text, 'utf8');
  }
  return text.length;
}

/** A header's values as Node reports them (a string, or an array for repeatable ones), or undefined. */
export function headerValues(
  headers: IncomingHttpHeaders,
  name: string,
): readonly string[] | undefined {
  const value = headers[name.toLowerCase()];
  if (value === undefined) return undefined;
  return typeof value === 'string' ? [value] : value;
}

/** `application/json` or any `+json` media type (RFC 6839), parameters ignored, any case. */
export function isJsonContentType(contentType: string | undefined): boolean {
  if (contentType === undefined) return false;
  if (contentType === 'application/json') return true;
  const semicolon = contentType.indexOf(';');
  const mediaType = (semicolon === -1 ? contentType : contentType.slice(0, semicolon))
    .trim()
    .toLowerCase();
  if (mediaType === 'application/json') return true;
  const slash = mediaType.indexOf('/');
  return slash > 0 && mediaType.endsWith('+json') && mediaType.length > slash + '+json'.length + 1;
}

/**
 * Query pairs in canonical order: split on '&' (empty pieces skipped), each split at its first
 * '=' (`a` and `a=` both give an empty value, as URLSearchParams does), names and values decoded
 * to bytes ('+' is a space, %XX a byte, other characters UTF-8), then stably sorted by name bytes.
 * So `a=1&b=2` equals `b=2&a=1` and `%41=1` equals `A=1`, but `a=1&a=2` differs from `a=2&a=1`:
 * many servers read repeated names as an ordered list.
 */
export function canonicalQueryPairs(query: string): [name: Buffer, value: Buffer][] {
  const pairs: [Buffer, Buffer][] = [];
  if (query === '') return pairs;
  for (const piece of query.split('&')) {
    if (piece === '') continue;
    const equals = piece.indexOf('=');
    const name = equals === -1 ? piece : piece.slice(0, equals);
    const value = equals === -1 ? '' : piece.slice(equals + 1);
    pairs.push([decodeFormComponent(name), decodeFormComponent(value)]);
  }
  // Array#sort is stable (ES2019), so repeated names keep their order.
  return pairs.sort((a, b) => Buffer.compare(a[0], b[0]));
}

/**
 * application/x-www-form-urlencoded decoding to bytes. Working on bytes rather than a decoded
 * string keeps it exact: an invalid UTF-8 escape like %FF stays distinct from %FE instead of both
 * becoming U+FFFD. A '%' not followed by two hex digits is kept literally, as URLSearchParams does.
 */
function decodeFormComponent(text: string): Buffer {
  const bytes = Buffer.from(text, 'utf8');
  if (!text.includes('%') && !text.includes('+')) return bytes;
  // UTF-8 never uses ASCII bytes inside multi-byte sequences, so decoding in place on bytes is
  // safe.
  let write = 0;
  for (let read = 0; read < bytes.length; read++) {
    const byte = bytes[read] as number;
    if (byte === 0x2b /* + */) {
      bytes[write++] = 0x20;
    } else if (byte === 0x25 /* % */ && isHexPair(bytes, read + 1)) {
      bytes[write++] =
        (hexValue(bytes[read + 1] as number) << 4) | hexValue(bytes[read + 2] as number);
      read += 2;
    } else {
      bytes[write++] = byte;
    }
  }
  return bytes.subarray(0, write);
}

function isHexPair(bytes: Buffer, at: number): boolean {
  return (
    at + 1 < bytes.length &&
    hexValue(bytes[at] as number) >= 0 &&
    hexValue(bytes[at + 1] as number) >= 0
  );
}

function hexValue(byte: number): number {
  if (byte >= 0x30 && byte <= 0x39) return byte - 0x30;
  const lower = byte | 0x20;
  if (lower >= 0x61 && lower <= 0x66) return lower - 0x61 + 10;
  return -1;
}

/** Parses the body as JSON at most once per request, however many parts read it. */
class LazyJsonBody {
  private parsed: ParsedJson | null | undefined;

  constructor(readonly bytes: Buffer) {}

  json(): ParsedJson | null {
    if (this.parsed === undefined) {
      this.parsed = this.bytes.length === 0 ? null : parseJson(this.bytes);
    }
    return this.parsed;
  }
}

/** For the parts of a raw fingerprint (FramedHash.part), none of which reads the body. */
const NO_BODY = new LazyJsonBody(Buffer.alloc(0));

function writePart(
  framed: FramedHash,
  part: RequestPart,
  input: FingerprintInput,
  body: LazyJsonBody,
  ignore: IgnorePaths,
): void {
  switch (part.kind) {
    case 'method':
      framed.field('method').field(input.method.toUpperCase());
      return;
    case 'path':
      framed.field('path').field(input.path);
      return;
    case 'query':
      framed.field('query').list(canonicalQueryPairs(input.query).flat());
      return;
    case 'body':
      writeBody(framed.field('body'), input, body, ignore);
      return;
    case 'raw-body':
      framed.field('raw-body').field(input.body);
      return;
    case 'body-field':
      writeBodyField(framed.field('body-field').list(part.path), part.path, body, ignore);
      return;
    case 'header':
      framed.field('header').field(part.name).optionalList(headerValues(input.headers, part.name));
      return;
    case 'query-param':
      framed
        .field('query-param')
        .field(part.name)
        .optionalList(queryParamValues(input.query, part.name));
      return;
  }
}

/**
 * JSON mode only when the content type says JSON and the body parses: then formatting, key order
 * and number spelling do not matter, and `ignore` applies. Anything else (including an empty body
 * or a JSON content type with a body that does not parse) is hashed as its exact bytes.
 */
function writeBody(
  framed: FramedHash,
  input: FingerprintInput,
  body: LazyJsonBody,
  ignore: IgnorePaths,
): void {
  const parsed = isJsonContentType(input.contentType) ? body.json() : null;
  if (parsed === null) framed.field('bytes').field(input.body);
  else framed.field('json').field(canonicalize(parsed, ignore));
}

/**
 * A field is read whenever the body parses as JSON, whatever the content type: many upstreams
 * parse JSON regardless of it, and reading more never makes two different requests look equal.
 * A body that is not JSON has no fields, so the field is "absent".
 */
function writeBodyField(
  framed: FramedHash,
  path: readonly string[],
  body: LazyJsonBody,
  ignore: IgnorePaths,
): void {
  const parsed = body.json();
  const value = parsed === null ? undefined : canonicalizeAt(parsed, path, ignore);
  if (value === undefined) framed.field('absent');
  else framed.field('json').field(value);
}

/** The decoded values of one query parameter, in request order, or undefined when absent. */
function queryParamValues(query: string, name: string): Buffer[] | undefined {
  const wanted = Buffer.from(name, 'utf8');
  const values = canonicalQueryPairs(query)
    .filter(([pairName]) => pairName.equals(wanted))
    .map(([, value]) => value);
  return values.length === 0 ? undefined : values;
}
