// The request log line's fields, written for RequestLogEntry's own fields rather than for any object:
// the bytes JSON.stringify (and so pino) would write for an entry from newLogEntry, at less cost. On
// a cached replay the generic jsonFields walk was ~10k of the request's ~111k instructions
// (callgrind): a for-in over ~25 fields, most of them undefined, a Map lookup per field name, the
// escape test on every string, and a piece per name and per value that the batch's flattening
// walks again when the batch is written.
import type { Logger } from 'pino';
import type { RequestLogEntry } from '../http/request-log';
import { quote } from '../idempotency/canonical-json';
import { flatString, infoLineWriter } from './logger';

/** A function that logs one request's entry (the app calls it once the response is done). */
export function requestLineWriter(logger: Logger): (entry: RequestLogEntry) => void {
  return infoLineWriter(logger, 'request', requestLineFields);
}

/**
 * `,"name":<value>` for a number field whose values repeat from line to line (a 0 ms wait): written
 * once for the last value seen and reused while it repeats. NaN never equals the last value, so it
 * is written each time (as null); -0 reuses 0's "0", which is what JSON writes for it too.
 */
class RepeatedNumber {
  private last = Number.NaN;
  private written = '';

  constructor(private readonly prefix: string) {}

  of(value: number): string {
    if (value !== this.last) {
      this.last = value;
      this.written = this.prefix + jsonNumber(value);
    }
    return this.written;
  }
}

const storeMs = new RepeatedNumber(',"storeMs":');
const upstreamMs = new RepeatedNumber(',"upstreamMs":');
const waitMs = new RepeatedNumber(',"waitMs":');

/**
 * The fields whose values come from a small set and change together rarely (on one route: its name
 * and method; the outcome, status and attempts; the flags and labels after the timings), written as
 * one flat piece for the last values seen and reused while they repeat. Their strings (route names,
 * labels) are escaped once per change instead of once per line, and a line is fewer pieces.
 */
let route: string | undefined;
let method: string | undefined;
let routeAndMethod = '';

let outcome: string | undefined;
let status: number | undefined;
let attempts: number | undefined;
let outcomeToAttempts = '';

let shadow: string | undefined;
let keyDerived: boolean | undefined;
let cached: boolean | undefined;
let coalesced: boolean | undefined;
let outcomeUnknown: boolean | undefined;
let clientClosedEarly: boolean | undefined;
let landing: string | undefined;
let reconcile: string | undefined;
let flags = '';

let tool: string | undefined;
let toolField = '';

/**
 * The entry's fields as JSON.stringify writes them, each after a comma, without the braces: in
 * newLogEntry's property order, which is the order JSON.stringify follows (every field is present
 * from the start, so one set later, such as rawTarget, keeps its place). A field added to
 * newLogEntry must be added here too: the unit test compares the two for every field it creates.
 */
export function requestLineFields(entry: RequestLogEntry): string {
  if (entry.route !== route || entry.method !== method) {
    route = entry.route;
    method = entry.method;
    routeAndMethod = flatString(
      (route === undefined ? '' : ',"route":' + quote(route)) + ',"method":' + quote(method),
    );
  }
  let out = routeAndMethod + ',"path":' + quote(entry.path);
  if (entry.key !== undefined) out += ',"key":' + quote(entry.key);
  if (entry.outcome !== outcome || entry.status !== status || entry.attempts !== attempts) {
    outcome = entry.outcome;
    status = entry.status;
    attempts = entry.attempts;
    outcomeToAttempts = flatString(
      ',"outcome":' +
        quote(outcome) +
        ',"status":' +
        jsonNumber(status) +
        (attempts === undefined ? '' : ',"attempts":' + jsonNumber(attempts)),
    );
  }
  out += outcomeToAttempts;
  out += storeMs.of(entry.storeMs);
  out += upstreamMs.of(entry.upstreamMs);
  out += waitMs.of(entry.waitMs);
  out += ',"totalMs":' + jsonNumber(entry.totalMs);
  if (
    entry.shadow !== shadow ||
    entry.keyDerived !== keyDerived ||
    entry.cached !== cached ||
    entry.coalesced !== coalesced ||
    entry.outcomeUnknown !== outcomeUnknown ||
    entry.clientClosedEarly !== clientClosedEarly ||
    entry.landing !== landing ||
    entry.reconcile !== reconcile
  ) {
    shadow = entry.shadow;
    keyDerived = entry.keyDerived;
    cached = entry.cached;
    coalesced = entry.coalesced;
    outcomeUnknown = entry.outcomeUnknown;
    clientClosedEarly = entry.clientClosedEarly;
    landing = entry.landing;
    reconcile = entry.reconcile;
    flags = flatString(
      stringField(',"shadow":', shadow) +
        booleanField(',"keyDerived":', keyDerived) +
        booleanField(',"cached":', cached) +
        booleanField(',"coalesced":', coalesced) +
        booleanField(',"outcomeUnknown":', outcomeUnknown) +
        booleanField(',"clientClosedEarly":', clientClosedEarly) +
        stringField(',"landing":', landing) +
        stringField(',"reconcile":', reconcile),
    );
  }
  if (flags !== '') out += flags;
  if (entry.rawTarget !== undefined) out += ',"rawTarget":' + quote(entry.rawTarget);
  if (entry.tool !== undefined) {
    if (entry.tool !== tool) {
      tool = entry.tool;
      toolField = flatString(',"tool":' + quote(tool));
    }
    out += toolField;
  }
  if (entry.firstByteMs !== undefined) out += ',"firstByteMs":' + jsonNumber(entry.firstByteMs);
  if (entry.streamedBytes !== undefined)
    out += ',"streamedBytes":' + jsonNumber(entry.streamedBytes);
  return out;
}

/** `,"name":"value"`, or nothing for an undefined value. */
function stringField(prefix: string, value: string | undefined): string {
  return value === undefined ? '' : prefix + quote(value);
}

/** `,"name":true` or false, or nothing for an undefined value. */
function booleanField(prefix: string, value: boolean | undefined): string {
  return value === undefined ? '' : prefix + (value ? 'true' : 'false');
}

/** A number as JSON.stringify writes it: null when not finite. */
function jsonNumber(value: number): string {
  return Number.isFinite(value) ? String(value) : 'null';
}
