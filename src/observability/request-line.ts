// The request log line's fields, written for RequestLogEntry's own fields rather than for any object:
// the bytes JSON.stringify (and so pino) would write for an entry from newLogEntry, at less cost. On
// a cached replay the generic jsonFields walk was ~10k of the request's ~111k instructions
// (callgrind): a for-in over ~25 fields, most of them undefined, a Map lookup per field name, the
// escape test on every string, and a piece per name and per value that the batch's flattening
// walks again when the batch is written.
import type { Logger } from 'pino';
import type { RequestLogEntry } from '../http/request-log';
import { quote } from '../idempotency/canonical-json';
import { infoLineWriter } from './logger';

/** A function that logs one request's entry (the app calls it once the response is done). */
export function requestLineWriter(logger: Logger): (entry: RequestLogEntry) => void {
  return infoLineWriter(logger, 'request', requestLineFields);
}

/**
 * `,"name":<value>` for a field whose values repeat from line to line (the route's name, the method,
 * the outcome label, the status, a 0 ms wait): written once for the last value seen and reused while
 * it repeats, which on a busy route is nearly every line. NaN never equals the last value, so it is
 * written each time (as null); -0 reuses 0's "0", which is what JSON writes for it too.
 */
class Repeated<Value extends string | number> {
  private last: Value | undefined;
  private written = '';

  constructor(
    private readonly prefix: string,
    private readonly write: (value: Value) => string,
  ) {}

  of(value: Value): string {
    if (value !== this.last) {
      this.last = value;
      this.written = this.prefix + this.write(value);
    }
    return this.written;
  }
}

const route = new Repeated<string>(',"route":', quote);
const method = new Repeated<string>(',"method":', quote);
const outcome = new Repeated<string>(',"outcome":', quote);
const status = new Repeated<number>(',"status":', jsonNumber);
const attempts = new Repeated<number>(',"attempts":', jsonNumber);
const storeMs = new Repeated<number>(',"storeMs":', jsonNumber);
const upstreamMs = new Repeated<number>(',"upstreamMs":', jsonNumber);
const waitMs = new Repeated<number>(',"waitMs":', jsonNumber);
const shadow = new Repeated<string>(',"shadow":', quote);
const landing = new Repeated<string>(',"landing":', quote);
const reconcile = new Repeated<string>(',"reconcile":', quote);
const tool = new Repeated<string>(',"tool":', quote);

/**
 * The entry's fields as JSON.stringify writes them, each after a comma, without the braces: in
 * newLogEntry's property order, which is the order JSON.stringify follows (every field is present
 * from the start, so one set later, such as rawTarget, keeps its place). A field added to
 * newLogEntry must be added here too: the unit test compares the two for every field it creates.
 */
export function requestLineFields(entry: RequestLogEntry): string {
  let out = '';
  if (entry.route !== undefined) out += route.of(entry.route);
  out += method.of(entry.method);
  out += ',"path":' + quote(entry.path);
  if (entry.key !== undefined) out += ',"key":' + quote(entry.key);
  out += outcome.of(entry.outcome);
  out += status.of(entry.status);
  if (entry.attempts !== undefined) out += attempts.of(entry.attempts);
  out += storeMs.of(entry.storeMs);
  out += upstreamMs.of(entry.upstreamMs);
  out += waitMs.of(entry.waitMs);
  out += ',"totalMs":' + jsonNumber(entry.totalMs);
  if (entry.shadow !== undefined) out += shadow.of(entry.shadow);
  if (entry.keyDerived !== undefined)
    out += entry.keyDerived ? ',"keyDerived":true' : ',"keyDerived":false';
  if (entry.cached !== undefined) out += entry.cached ? ',"cached":true' : ',"cached":false';
  if (entry.coalesced !== undefined)
    out += entry.coalesced ? ',"coalesced":true' : ',"coalesced":false';
  if (entry.outcomeUnknown !== undefined)
    out += entry.outcomeUnknown ? ',"outcomeUnknown":true' : ',"outcomeUnknown":false';
  if (entry.clientClosedEarly !== undefined)
    out += entry.clientClosedEarly ? ',"clientClosedEarly":true' : ',"clientClosedEarly":false';
  if (entry.landing !== undefined) out += landing.of(entry.landing);
  if (entry.reconcile !== undefined) out += reconcile.of(entry.reconcile);
  if (entry.rawTarget !== undefined) out += ',"rawTarget":' + quote(entry.rawTarget);
  if (entry.tool !== undefined) out += tool.of(entry.tool);
  if (entry.firstByteMs !== undefined) out += ',"firstByteMs":' + jsonNumber(entry.firstByteMs);
  if (entry.streamedBytes !== undefined)
    out += ',"streamedBytes":' + jsonNumber(entry.streamedBytes);
  return out;
}

/** A number as JSON.stringify writes it: null when not finite. */
function jsonNumber(value: number): string {
  return Number.isFinite(value) ? String(value) : 'null';
}
