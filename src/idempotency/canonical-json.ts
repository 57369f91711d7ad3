// Canonical JSON for fingerprints and derived keys: two request bodies that mean the same JSON
// document serialise to the same string, and bodies that differ in any value do not.
//
// The canonical form follows RFC 8785 (JCS) except for numbers:
// - object members sorted by key, compared as UTF-16 code units (RFC 8785 §3.2.3);
// - no insignificant whitespace; strings re-serialised with JSON.stringify, which is RFC 8785's
//   string form (§3.2.2.2), so "\u0041" and "A" are equal;
// - numbers are NOT rounded to the nearest double (RFC 8785 §3.2.2.3 does that, which would make
//   12345678901234567890 equal 12345678901234567891). Each number's source text is normalised
//   exactly instead, see `canonicalNumber`.
// - duplicate keys in one object are refused (DuplicateJsonKeyError): JSON.parse keeps the last,
//   other parsers the first or both, so the proxy and the upstream could read different values.
// - documents nested deeper than MAX_DEPTH arrays/objects are treated as not JSON (callers hash
//   them as bytes), so a hostile body cannot overflow the stack.
//
// `ignore` paths name object members by key only: arrays are never indexed, so an ignore path (or
// a `body.<path>` field) never reaches inside an array.

import { isUtf8 } from 'node:buffer';
import { parse as parseLossless } from 'lossless-json';

/** Arrays/objects nested deeper than this make a body "not JSON" for our purposes. */
export const MAX_DEPTH = 1000;

/** A number whose canonical text is already computed (the exact path; see `canonicalNumber`). */
class ExactNumber {
  constructor(readonly canonical: string) {}
}

type JsonValue = null | boolean | string | number | ExactNumber | JsonValue[] | JsonObject;
interface JsonObject {
  [key: string]: JsonValue;
}

/** A body whose JSON has an object with the same key twice (`{"amount":1000,"amount":1}`). */
export class DuplicateJsonKeyError extends Error {
  constructor() {
    super('duplicate key in a JSON object');
    this.name = 'DuplicateJsonKeyError';
  }
}

/** A parsed JSON body, opaque to callers: parse once, then serialise it or fields of it. */
export interface ParsedJson {
  readonly value: unknown;
}

/** Ignore paths compiled into a tree: `drop` removes the member, `children` go one level down. */
interface IgnoreNode {
  drop: boolean;
  readonly children: Map<string, IgnoreNode>;
}

type IgnorePaths = readonly (readonly string[])[];

/**
 * A number token that JSON.parse cannot be trusted with: an exponent, or 16 digits or more (before
 * and after the point together). A decimal of at most 15 significant digits and no exponent is held
 * by the nearest double closely enough that String() gives back exactly its digits, laid out as
 * canonicalNumber lays them out; beyond that, two different numbers can share a double. A number
 * token is always preceded by `[`, `,` or `:` and optional whitespace (or starts the document,
 * checked separately). Matches inside strings are harmless false positives: they only send the body
 * down the slower exact path.
 */
const RISKY_NUMBER = /[:,[][\t\n\r ]*-?(?:(?:\d\.?){16}|\d[\d.]*[eE])/;
const STARTS_WITH_NUMBER = /^[\t\n\r ]*[-\d]/;

/** Why a body is not read as JSON, for a caller that must say so (an MCP route's answer). */
export type JsonRefusal = 'not_utf8' | 'not_json' | 'too_deep' | 'duplicate_key';

export type JsonReading =
  | { readonly ok: true; readonly parsed: ParsedJson }
  | { readonly ok: false; readonly reason: JsonRefusal };

/**
 * Parses a body as JSON, or returns null when it is not UTF-8, not JSON, or nested deeper than
 * MAX_DEPTH; throws DuplicateJsonKeyError for a JSON document with a duplicate object key.
 */
export function parseJson(body: Buffer | string): ParsedJson | null {
  const reading = readJson(body);
  if (reading.ok) return reading.parsed;
  if (reading.reason === 'duplicate_key') throw new DuplicateJsonKeyError();
  return null;
}

/**
 * Parses a body as JSON, or says why not. Documents whose numbers all have at most 15 digits and
 * no exponent take JSON.parse (native, fast); any other document is parsed with lossless-json so
 * every number keeps its exact value. A BOM is not JSON (RFC 8259 §8.1): a caller that accepts
 * one strips it first.
 */
export function readJson(body: Buffer | string): JsonReading {
  const text = decodeUtf8(body);
  if (text === null) return { ok: false, reason: 'not_utf8' };
  let value: JsonValue;
  const exact = needsExactNumbers(text);
  try {
    value = exact
      ? (parseLossless(text, null, {
          parseNumber: toExactNumber,
          onDuplicateKey: refuseDuplicate,
        }) as JsonValue)
      : (JSON.parse(text) as JsonValue);
  } catch (error) {
    if (error instanceof DuplicateJsonKeyError) return { ok: false, reason: 'duplicate_key' };
    // SyntaxError for bad JSON; RangeError when lossless-json's recursion overflows on a very deep
    // document (which the depth check below would reject anyway).
    return { ok: false, reason: error instanceof RangeError ? 'too_deep' : 'not_json' };
  }
  const members = { count: 0 };
  if (!withinDepth(value, 0, members)) return { ok: false, reason: 'too_deep' };
  // JSON.parse keeps the last of two equal keys without a word (lossless-json reports only those
  // with different values): a document with more members in its text than in its objects had one.
  if (members.count !== memberCount(text)) return { ok: false, reason: 'duplicate_key' };
  return { ok: true, parsed: { value } };
}

/**
 * The members written in a JSON text: its ":" outside strings (each member has exactly one, and
 * nothing else in JSON does). Jumps from quote to quote and colon to colon with indexOf, so a body
 * costs about one native scan.
 */
function memberCount(text: string): number {
  let count = 0;
  let colon = text.indexOf(':');
  let at = 0;
  while (colon !== -1) {
    const quote = text.indexOf('"', at);
    const stringStart = quote === -1 ? text.length : quote;
    while (colon !== -1 && colon < stringStart) {
      count++;
      colon = text.indexOf(':', colon + 1);
    }
    if (quote === -1) break;
    at = stringEnd(text, quote) + 1;
    if (at === 0) break; // an unterminated string: JSON.parse would have thrown
    if (colon !== -1 && colon < at) colon = text.indexOf(':', at);
  }
  return count;
}

/** Index of the quote closing the string that opens at `quote`, or -1. */
function stringEnd(text: string, quote: number): number {
  let from = quote + 1;
  for (;;) {
    const end = text.indexOf('"', from);
    if (end === -1) return -1;
    let backslashes = 0;
    while (text.charCodeAt(end - 1 - backslashes) === 0x5c) backslashes++;
    if (backslashes % 2 === 0) return end;
    from = end + 1;
  }
}

/**
 * The canonical serialisation of a JSON body with the `ignore` paths removed, or null when the
 * bytes are not valid UTF-8 JSON (or are nested deeper than MAX_DEPTH).
 */
export function canonicalJson(body: Buffer | string, ignore: IgnorePaths = []): string | null {
  const parsed = parseJson(body);
  return parsed === null ? null : canonicalize(parsed, ignore);
}

/**
 * The canonical JSON of the value at `path` (object keys; arrays are not indexed), with `ignore`
 * applied, or undefined when the field is absent, ignored, or the body is not JSON.
 */
export function jsonValueAt(
  body: Buffer | string,
  path: readonly string[],
  ignore: IgnorePaths = [],
): string | undefined {
  const parsed = parseJson(body);
  return parsed === null ? undefined : canonicalizeAt(parsed, path, ignore);
}

/** Canonical JSON of an already parsed body (see `parseJson`), with `ignore` applied. */
export function canonicalize(parsed: ParsedJson, ignore: IgnorePaths = []): string {
  return serialize(parsed.value as JsonValue, compileIgnore(ignore));
}

/** Canonical JSON of the value at `path` in a parsed body, or undefined if absent or ignored. */
export function canonicalizeAt(
  parsed: ParsedJson,
  path: readonly string[],
  ignore: IgnorePaths = [],
): string | undefined {
  let value = parsed.value as JsonValue;
  let node = compileIgnore(ignore);
  for (const segment of path) {
    if (!isPlainObject(value) || !Object.hasOwn(value, segment)) return undefined;
    const child = node?.children.get(segment);
    if (child?.drop === true) return undefined;
    value = value[segment] as JsonValue;
    node = child ?? null;
  }
  return serialize(value, node);
}

/** The string at `path` (object keys), or undefined when absent or not a string. */
export function stringAt(parsed: ParsedJson, path: readonly string[]): string | undefined {
  const value = valueAt(parsed.value as JsonValue, path);
  return typeof value === 'string' ? value : undefined;
}

/** True when the value at `path` exists (even as null). */
export function hasValueAt(parsed: ParsedJson, path: readonly string[]): boolean {
  return valueAt(parsed.value as JsonValue, path) !== undefined;
}

/** The elements of a top-level array, each as a parsed document; undefined for anything else. */
export function arrayElements(parsed: ParsedJson): ParsedJson[] | undefined {
  const value = parsed.value as JsonValue;
  return Array.isArray(value) ? value.map((element) => ({ value: element })) : undefined;
}

function valueAt(value: JsonValue | undefined, path: readonly string[]): JsonValue | undefined {
  for (const segment of path) {
    if (value === undefined || !isPlainObject(value) || !Object.hasOwn(value, segment))
      return undefined;
    value = value[segment];
  }
  return value;
}

/**
 * Exact canonical text of a JSON number token (RFC 8259 §6 grammar, already validated).
 *
 * The value is reduced to sign, significant digits d1..dk (no leading or trailing zeros) and n,
 * with value = 0.d1..dk × 10^n; then laid out as ECMAScript Number::toString does (ECMA-262
 * §6.1.6.1.20, the layout RFC 8785 §3.2.2.3 uses), but with the exact digits instead of the
 * nearest double's:
 *   k ≤ n ≤ 21     integer digits:          100, 12345678901234567890
 *   0 < n ≤ 21     decimal point inside:    1.5, 123.456
 *   -6 < n ≤ 0     leading "0.":            0.001
 *   otherwise      d1[.d2..dk]e±(n-1):      1e+21, 1.5e-7, 1.2345678901234567890123e+22
 * Zero (including -0, 0.0, 0e5) is "0"; negative values get a leading "-".
 * So 1, 1.0, 1e0, 10e-1 and 0.1e1 all become "1".
 */
export function canonicalNumber(text: string): string {
  // Fast path: a plain integer without leading zeros is already canonical (except -0).
  if (PLAIN_INTEGER.test(text)) return text === '-0' ? '0' : text;

  const match = NUMBER_PARTS.exec(text);
  if (match === null) throw new SyntaxError(`not a JSON number: ${JSON.stringify(text)}`);
  const negative = match[1] === '-';
  const intDigits = match[2] ?? '';
  const fracDigits = match[3] ?? '';
  const expText = match[4] ?? '0';

  const all = intDigits + fracDigits;
  let first = 0;
  while (first < all.length && all.charCodeAt(first) === ZERO) first++;
  if (first === all.length) return '0';
  let end = all.length;
  while (all.charCodeAt(end - 1) === ZERO) end--;
  const digits = all.slice(first, end);

  // value = 0.digits × 10^n, where n = exponent + (integer digits before the first significant one).
  const shift = intDigits.length - first;
  const sign = negative ? '-' : '';
  const expDigits = expText.replace(LEADING_EXP_ZEROS, '$1');
  if (expDigits.replace(/^[-+]/, '').length > 15) {
    // An exponent this large cannot land in the plain layouts; use BigInt so it stays exact.
    return sign + scientific(digits, (BigInt(expDigits) + BigInt(shift) - 1n).toString());
  }
  const n = Number(expDigits) + shift;
  return sign + layout(digits, n);
}

const ZERO = 0x30;
const PLAIN_INTEGER = /^-?(?:0|[1-9]\d{0,20})$/;
const NUMBER_PARTS = /^(-?)(\d+)(?:\.(\d+))?(?:[eE]([-+]?\d+))?$/;
const LEADING_EXP_ZEROS = /^([-+]?)0+(?=\d)/;

function layout(digits: string, n: number): string {
  const k = digits.length;
  if (k <= n && n <= 21) return digits + '0'.repeat(n - k);
  if (0 < n && n <= 21) return `${digits.slice(0, n)}.${digits.slice(n)}`;
  if (-6 < n && n <= 0) return `0.${'0'.repeat(-n)}${digits}`;
  return scientific(digits, String(n - 1));
}

function scientific(digits: string, exponent: string): string {
  const mantissa = digits.length === 1 ? digits : `${digits[0]}.${digits.slice(1)}`;
  return `${mantissa}e${exponent.startsWith('-') ? exponent : `+${exponent}`}`;
}

function decodeUtf8(body: Buffer | string): string | null {
  if (typeof body === 'string') return body;
  // Decode strictly: lenient decoding maps every invalid sequence to U+FFFD, which would make
  // different bodies canonicalise alike. A BOM is kept, so JSON parsing rejects it (RFC 8259 §8.1).
  return isUtf8(body) ? body.toString('utf8') : null;
}

function needsExactNumbers(text: string): boolean {
  return RISKY_NUMBER.test(text) || STARTS_WITH_NUMBER.test(text);
}

function toExactNumber(text: string): ExactNumber {
  return new ExactNumber(canonicalNumber(text));
}

function refuseDuplicate(): never {
  throw new DuplicateJsonKeyError();
}

function isPrimitive(value: JsonValue): boolean {
  return typeof value !== 'object' || value === null;
}

function isPlainObject(value: JsonValue): value is JsonObject {
  return (
    typeof value === 'object' &&
    value !== null &&
    !Array.isArray(value) &&
    !(value instanceof ExactNumber)
  );
}

/**
 * Stops (false) as soon as MAX_DEPTH is exceeded, so it never recurses deeper than that itself;
 * counts the object members it walks past.
 */
function withinDepth(value: JsonValue, depth: number, members: { count: number }): boolean {
  if (typeof value !== 'object' || value === null || value instanceof ExactNumber) return true;
  if (depth >= MAX_DEPTH) return false;
  if (Array.isArray(value)) {
    for (const item of value) {
      // Most elements of big arrays are numbers or strings: no call for them.
      if (typeof item === 'object' && item !== null && !withinDepth(item, depth + 1, members))
        return false;
    }
    return true;
  }
  const keys = Object.keys(value);
  members.count += keys.length;
  for (const key of keys) {
    if (!withinDepth(value[key] as JsonValue, depth + 1, members)) return false;
  }
  return true;
}

function serialize(value: JsonValue, ignore: IgnoreNode | null): string {
  switch (typeof value) {
    case 'string':
      return quote(value);
    case 'number':
      // Only the JSON.parse path yields numbers, and only for decimals of at most 15 digits without
      // an exponent (RISKY_NUMBER), whose String() is their canonical text; String(-0) is "0".
      return String(value);
    case 'boolean':
      return value ? 'true' : 'false';
    default:
      break;
  }
  if (value === null) return 'null';
  if (value instanceof ExactNumber) return value.canonical;
  if (Array.isArray(value)) return serializeArray(value);
  return serializeObject(value, ignore);
}

function serializeArray(items: readonly JsonValue[]): string {
  // An array of strings, JSON.parse numbers, booleans and nulls: JSON.stringify writes exactly the
  // canonical form (RFC 8785 strings; String() of a number of at most 15 digits), natively.
  if (items.every(isPrimitive)) return JSON.stringify(items);
  let out = '[';
  for (let i = 0; i < items.length; i++) {
    if (i > 0) out += ',';
    // Ignore paths do not index arrays, so elements are serialised with nothing ignored.
    out += serialize(items[i] as JsonValue, null);
  }
  return `${out}]`;
}

function serializeObject(object: JsonObject, ignore: IgnoreNode | null): string {
  const keys = sortKeys(Object.keys(object));
  let out = '{';
  let first = true;
  for (const key of keys) {
    const child = ignore === null ? undefined : ignore.children.get(key);
    if (child?.drop === true) continue;
    if (!first) out += ',';
    first = false;
    out += `${quote(key)}:${serialize(object[key] as JsonValue, child ?? null)}`;
  }
  return `${out}}`;
}

/** Characters JSON.stringify escapes (controls, quote, backslash) plus surrogates (lone ones are escaped). */
// eslint-disable-next-line no-control-regex -- matching control characters is the point here
const NEEDS_ESCAPE = /["\\\u0000-\u001f\ud800-\udfff]/;

/**
 * JSON.stringify's string form (RFC 8785 §3.2.2.2), skipping the call for the common plain string.
 * The request log line writes its strings with it too (observability/logger.ts).
 */
export function quote(text: string): string {
  return NEEDS_ESCAPE.test(text) ? JSON.stringify(text) : `"${text}"`;
}

/**
 * Sorts keys by UTF-16 code units, RFC 8785 §3.2.3's order (`<` on strings and the default sort
 * both compare code units). Most objects are small, where an insertion sort beats Array#sort.
 */
function sortKeys(keys: string[]): string[] {
  if (keys.length > 16) return keys.sort();
  for (let i = 1; i < keys.length; i++) {
    const key = keys[i] as string;
    let j = i - 1;
    while (j >= 0 && (keys[j] as string) > key) {
      keys[j + 1] = keys[j] as string;
      j--;
    }
    keys[j + 1] = key;
  }
  return keys;
}

/** Compiled ignore trees, cached per (frozen) policy array: the hot path never rebuilds them. */
const compiledIgnores = new WeakMap<IgnorePaths, IgnoreNode | null>();

function compileIgnore(paths: IgnorePaths): IgnoreNode | null {
  if (paths.length === 0) return null;
  const cached = compiledIgnores.get(paths);
  if (cached !== undefined) return cached;
  const root: IgnoreNode = { drop: false, children: new Map() };
  for (const path of paths) {
    // An empty path would mean "ignore the whole body"; the config never produces one, and
    // treating it as a no-op keeps a body from silently dropping out of the fingerprint.
    let node = root;
    for (const segment of path) {
      let child = node.children.get(segment);
      if (child === undefined) {
        child = { drop: false, children: new Map() };
        node.children.set(segment, child);
      }
      node = child;
    }
    if (node !== root) node.drop = true;
  }
  compiledIgnores.set(paths, root);
  return root;
}
