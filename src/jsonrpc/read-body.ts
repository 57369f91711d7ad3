// The one reader of a POST body on an MCP route. Every body is decoded exactly once, here, before
// anything asks what the message is: a body the proxy cannot read is refused and never forwarded,
// because a server that reads it more leniently (the SDK's TextDecoder drops a BOM and replaces a
// bad byte; body-parser inflates gzip and honours a charset) might run a tools/call the proxy never
// saw as one. What this reader accepts is what goes upstream: the inflated bytes without a BOM.
//
//   raw bytes (≤ maxRequestBytes) ─ charset utf-8? ─ Content-Encoding known? ─ inflate (≤ limit)
//     ─ BOM dropped ─ strict UTF-8 ─ JSON, no duplicate key, ≤ MAX_DEPTH ─► the message
//   refused: 413 too large, 415 encoding or charset, 400 -32700 unreadable, 400 -32600 invalid
import type { IncomingMessage } from 'node:http';
import { MIMEType, promisify } from 'node:util';
import zlib from 'node:zlib';
import type { ErrorCode } from '../errors';
import { BodyTooLargeError, readBody } from '../http/body';
import {
  type JsonRefusal,
  MAX_DEPTH,
  type ParsedJson,
  readJson,
} from '../idempotency/canonical-json';
import { INVALID_REQUEST, PARSE_ERROR, TRANSPORT_ERROR } from './jsonrpc';

/** What the client is told instead, in the shape the MCP SDK's server uses for the same failures. */
export interface BodyRefusal {
  readonly status: 400 | 413 | 415;
  /** The JSON-RPC error code: -32700 unreadable, -32600 invalid, -32000 refused by HTTP. */
  readonly code: number;
  /** `data.type`, for programs. */
  readonly type: string;
  /** The proxy's error code (the README's error table), where the refusal has one. */
  readonly errorCode?: ErrorCode;
  readonly message: string;
}

export type McpBody =
  /** `decoded`: the body was inflated, so the forwarded request must not say Content-Encoding. */
  | { readonly kind: 'read'; readonly body: Buffer; readonly parsed: ParsedJson; decoded: boolean }
  /** `unread`: the rest of the body is still on the connection, which must close after the answer. */
  | { readonly kind: 'refused'; readonly refusal: BodyRefusal; readonly unread: boolean }
  /** The client went away mid-body: nothing to answer. */
  | { readonly kind: 'gone' };

export type Coding = 'gzip' | 'deflate' | 'br';

export async function readMcpBody(req: IncomingMessage, limitBytes: number): Promise<McpBody> {
  let raw: Buffer;
  try {
    raw = await readBody(req, limitBytes);
  } catch (error) {
    if (!(error instanceof BodyTooLargeError)) return { kind: 'gone' };
    return { kind: 'refused', refusal: tooLarge(limitBytes, false), unread: true };
  }
  const decoded = await decodeMcpBody(req.headers, raw, limitBytes);
  return 'status' in decoded ? { kind: 'refused', refusal: decoded, unread: false } : decoded;
}

/** The body as it arrived → the message, or why not. */
export async function decodeMcpBody(
  headers: IncomingMessage['headers'],
  raw: Buffer,
  limitBytes: number,
): Promise<McpBody | BodyRefusal> {
  const charsetRefusal = unsupportedCharset(headers['content-type']);
  if (charsetRefusal !== undefined) return charsetRefusal;
  const codings = contentCodings(headers['content-encoding']);
  if (!Array.isArray(codings)) return codings;
  let bytes = raw;
  for (const coding of codings) {
    try {
      bytes = await inflate(coding, bytes, limitBytes);
    } catch (error) {
      if ((error as { code?: unknown }).code === 'ERR_BUFFER_TOO_LARGE')
        return tooLarge(limitBytes, true);
      return {
        status: 400,
        code: PARSE_ERROR,
        type: 'content_encoding_invalid',
        message: `Parse error: the message is not valid ${coding} data (Content-Encoding), so the proxy cannot read it. Send it compressed whole, or uncompressed.`,
      };
    }
  }
  const body = withoutBom(bytes);
  const reading = readJson(body);
  if (!reading.ok) return jsonRefusal(reading.reason);
  return { kind: 'read', body, parsed: reading.parsed, decoded: codings.length > 0 };
}

/**
 * The codings to undo, in the order to undo them (the reverse of the header's: the last coding
 * listed was applied last), or the refusal of one the proxy cannot decode. `identity` is none.
 */
export function contentCodings(header: string | string[] | undefined): Coding[] | BodyRefusal {
  if (header === undefined) return [];
  const listed = (Array.isArray(header) ? header.join(',') : header).split(',');
  const codings: Coding[] = [];
  for (const item of listed) {
    const name = item.trim().toLowerCase();
    if (name === '' || name === 'identity') continue;
    const coding = CODINGS.get(name);
    if (coding === undefined)
      return {
        status: 415,
        code: TRANSPORT_ERROR,
        type: 'content_encoding_unsupported',
        message: `Unsupported Media Type: the message is sent with Content-Encoding ${JSON.stringify(item.trim())}, which the proxy cannot decode, so it cannot tell which tool would run. Send it uncompressed, or as gzip, deflate or br.`,
      };
    codings.push(coding);
  }
  return codings.reverse();
}

const CODINGS: ReadonlyMap<string, Coding> = new Map([
  ['gzip', 'gzip'],
  ['x-gzip', 'gzip'],
  ['deflate', 'deflate'],
  ['br', 'br'],
]);

/**
 * A refusal unless the Content-Type's charset is utf-8 or absent. Besides util.MIMEType's reading,
 * every `charset=` in the header must say utf-8: body-parser's parser takes the last of two charset
 * parameters and allows spaces around `=`, where MIMEType takes the first and drops `charset =x`.
 */
export function unsupportedCharset(contentType: string | undefined): BodyRefusal | undefined {
  if (contentType === undefined) return undefined;
  let charset: string | null;
  try {
    charset = new MIMEType(contentType).params.get('charset');
  } catch {
    return charsetRefusal(
      `Unsupported Media Type: the Content-Type ${JSON.stringify(contentType)} cannot be parsed, so the proxy cannot tell the message's charset. Send Content-Type: application/json.`,
    );
  }
  const written = [...contentType.matchAll(CHARSET_PARAMETER)].map((match) => match[1] ?? '');
  const other = [charset ?? UTF8, ...written].find((name) => name.toLowerCase() !== UTF8);
  if (other === undefined) return undefined;
  return charsetRefusal(
    `Unsupported Media Type: the Content-Type says charset=${other}, and MCP messages are UTF-8 JSON. Send the message as UTF-8 (charset=utf-8, or no charset).`,
  );
}

const UTF8 = 'utf-8';
const CHARSET_PARAMETER = /charset[\t ]*=[\t ]*"?([^";,\t ]*)/gi;

function charsetRefusal(message: string): BodyRefusal {
  return { status: 415, code: TRANSPORT_ERROR, type: 'charset_unsupported', message };
}

const gunzip = promisify(zlib.gunzip);
const inflateZlib = promisify(zlib.inflate);
const brotliDecompress = promisify(zlib.brotliDecompress);

/** Undoes one coding; never holds more than `limitBytes` of output (a zip bomb stops there). */
function inflate(coding: Coding, bytes: Buffer, limitBytes: number): Promise<Buffer> {
  const options = { maxOutputLength: limitBytes };
  if (coding === 'gzip') return gunzip(bytes, options);
  // HTTP's deflate is the zlib format (RFC 9110 §8.4.1.2), as body-parser reads it.
  if (coding === 'deflate') return inflateZlib(bytes, options);
  return brotliDecompress(bytes, options);
}

const BOM = Buffer.from([0xef, 0xbb, 0xbf]);

/** The bytes without a leading UTF-8 BOM: the SDK's decoder drops one, so the proxy does too. */
export function withoutBom(bytes: Buffer): Buffer {
  return bytes.subarray(0, 3).equals(BOM) ? bytes.subarray(3) : bytes;
}

function tooLarge(limitBytes: number, inflated: boolean): BodyRefusal {
  const what = inflated ? 'Decompressed, the message' : 'The message';
  return {
    status: 413,
    code: TRANSPORT_ERROR,
    type: 'request_too_large',
    errorCode: 'REQUEST_TOO_LARGE',
    message: `${what} is larger than this route's limit of ${limitBytes} bytes (maxRequestBytes); send a smaller one.`,
  };
}

/** Each reason the JSON reader gives, answered as the SDK's server answers an unreadable body. */
export function jsonRefusal(reason: JsonRefusal): BodyRefusal {
  switch (reason) {
    case 'not_utf8':
      return {
        status: 400,
        code: PARSE_ERROR,
        type: 'json_not_utf8',
        message:
          'Parse error: the message is not valid UTF-8, so the proxy cannot tell which tool or arguments the server would read. Send it encoded as UTF-8.',
      };
    case 'not_json':
      return {
        status: 400,
        code: PARSE_ERROR,
        type: 'json_invalid',
        message:
          'Parse error: the message is not JSON. Send one JSON-RPC message, or a batch of them, as a JSON document.',
      };
    case 'too_deep':
      return {
        status: 400,
        code: INVALID_REQUEST,
        type: 'json_too_deep',
        message: `Invalid Request: the message nests arrays and objects more than ${MAX_DEPTH} deep, deeper than the proxy reads. Send it nested at most ${MAX_DEPTH} deep.`,
      };
    case 'duplicate_key':
      return {
        status: 400,
        code: INVALID_REQUEST,
        type: 'json_duplicate_key',
        errorCode: 'JSON_DUPLICATE_KEY',
        message:
          'Invalid Request: the message has an object with the same key twice, which parsers read differently, so the proxy cannot know which tool or arguments the server would run. Send each key once.',
      };
  }
}
