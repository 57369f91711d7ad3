// Parses the Idempotency-Key request header into the key the store is indexed by.
//
// Two forms are accepted (README.md#what-a-client-sees-on-a-protected-route): a bare value
// (`abc-123`, what most clients send) and an RFC 8941 sf-string (`"abc-123"`, as in
// draft-ietf-httpapi-idempotency-key-header). Either way the key itself must be 1..maxLength
// visible ASCII characters (0x21-0x7E), so it is safe to log, store as text and echo in problem
// details.
import type { IncomingMessage } from 'node:http';
import { headerLines } from '../http/header-lines';

export type KeyParseResult =
  { ok: true; key: string } | { ok: false; problem: 'missing' | 'invalid'; detail: string };

const DQUOTE = 0x22;
const BACKSLASH = 0x5c;
const VISIBLE_ASCII = /^[\x21-\x7e]+$/;

/**
 * Parses the key from `req.headersDistinct[name]` (one entry per header line).
 * `headerName` is only used to word the details (the configured header's display name).
 */
export function parseIdempotencyKey(
  values: readonly string[] | undefined,
  maxLength: number,
  headerName = 'Idempotency-Key',
): KeyParseResult {
  if (values === undefined || values.length === 0) {
    return missing(
      `${headerName} header is required on this route; send a unique key, such as a UUID, with each distinct request.`,
    );
  }
  if (values.length > 1) {
    return invalid(
      `${headerName} was sent ${values.length} times; send the key once, in a single header line.`,
    );
  }
  const value = trimOws(values[0] ?? '');
  if (value.charCodeAt(0) !== DQUOTE) return checkKey(value, maxLength, headerName);
  const parsed = parseSfString(value);
  if (typeof parsed !== 'string') return invalid(`${headerName} ${parsed.problem}`);
  return checkKey(parsed, maxLength, headerName);
}

/** A failure inside a quoted key, worded to follow the header name. */
interface SfStringProblem {
  problem: string;
}

/**
 * RFC 8941 §4.2.5 (parsing a String), for a value known to start with DQUOTE: only `\"` and `\\`
 * are escapes (§3.3.3), characters must be 0x20-0x7E, and nothing may follow the closing quote.
 * Parameters (`"abc";p=1`, §3.1.2) are valid structured-field syntax but meaningless here, so they
 * are refused rather than silently dropped.
 */
function parseSfString(value: string): string | SfStringProblem {
  let key = '';
  for (let i = 1; i < value.length; i++) {
    const code = value.charCodeAt(i);
    if (code === BACKSLASH) {
      i++; // i now indexes the escaped character, so the backslash is character i (1-based)
      const next = value.charCodeAt(i);
      if (next !== DQUOTE && next !== BACKSLASH) {
        return {
          problem: `has an invalid escape at character ${i}: in a quoted key only \\" and \\\\ may follow a backslash (RFC 8941 §3.3.3); send the key bare or escape it correctly.`,
        };
      }
      key += value[i];
    } else if (code === DQUOTE) {
      return afterClosingQuote(key, value.slice(i + 1));
    } else if (code < 0x20 || code > 0x7e) {
      return { problem: `contains ${describeChar(code)} at character ${i + 1}; ${VISIBLE_HINT}` };
    } else {
      key += value[i];
    }
  }
  return {
    problem:
      'starts with a double quote but has no closing quote; send the key bare (abc-123) or as a complete quoted string ("abc-123").',
  };
}

function afterClosingQuote(key: string, rest: string): string | SfStringProblem {
  if (rest === '') return key;
  if (rest.charCodeAt(0) === 0x3b /* ; */) {
    return {
      problem:
        'has parameters after the quoted key (";..."), which this proxy does not use; send just the key, e.g. "abc-123".',
    };
  }
  return {
    problem:
      'has characters after the closing quote; send exactly one key, bare (abc-123) or quoted ("abc-123").',
  };
}

export function checkKey(key: string, maxLength: number, headerName: string): KeyParseResult {
  const rule = `${headerName} must be 1 to ${maxLength} visible ASCII characters`;
  if (key.length === 0) {
    return invalid(`${rule} (got an empty key); send a unique key such as a UUID.`);
  }
  if (key.length > maxLength) {
    return invalid(`${rule} (got ${key.length} characters); send a shorter key such as a UUID.`);
  }
  if (VISIBLE_ASCII.test(key)) return { ok: true, key };
  const index = firstNonVisible(key);
  return invalid(
    `${rule} (got ${describeChar(key.charCodeAt(index))} at character ${index + 1}); ${VISIBLE_HINT}`,
  );
}

const VISIBLE_HINT =
  'use only visible ASCII characters (no spaces, control or non-ASCII characters), such as a UUID.';

function firstNonVisible(key: string): number {
  for (let i = 0; i < key.length; i++) {
    const code = key.charCodeAt(i);
    if (code < 0x21 || code > 0x7e) return i;
  }
  return -1;
}

const CHAR_NAMES: ReadonlyMap<number, string> = new Map([
  [0x09, 'tab'],
  [0x0a, 'line feed'],
  [0x0d, 'carriage return'],
  [0x20, 'space'],
  [0x7f, 'DEL'],
]);

/**
 * Names a rejected character by code point, never by the character itself: echoing a control or
 * non-ASCII character raw into a problem body or a log line is how log injection starts.
 */
function describeChar(code: number): string {
  const hex = `U+${code.toString(16).toUpperCase().padStart(4, '0')}`;
  const name = CHAR_NAMES.get(code);
  return name === undefined ? hex : `${hex} (${name})`;
}

/** RFC 9110 §5.6.3 OWS: spaces and tabs only (Node already trims these, but do not rely on it). */
function trimOws(value: string): string {
  let start = 0;
  let end = value.length;
  while (start < end && isOws(value.charCodeAt(start))) start++;
  while (end > start && isOws(value.charCodeAt(end - 1))) end--;
  return value.slice(start, end);
}

function isOws(code: number): boolean {
  return code === 0x20 || code === 0x09;
}

function missing(detail: string): KeyParseResult {
  return { ok: false, problem: 'missing', detail };
}

function invalid(detail: string): KeyParseResult {
  return { ok: false, problem: 'invalid', detail };
}

/**
 * The key header's lines, each as sent (a repeated line is seen, whatever Node would make of it in
 * req.headers: join it, or keep only the first), read from the raw lines so a request whose key is
 * all the proxy reads never has Node build req.headers (http/header-lines.ts).
 */
export function keyHeaderLines(req: IncomingMessage, name: string): string[] | undefined {
  return headerLines(req.rawHeaders, name);
}
