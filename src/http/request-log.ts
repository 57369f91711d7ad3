// One structured log line per request. Handlers fill in the entry as they go; the app writes
// it once the response is finished or the client went away.
export type OutcomeLabel =
  | 'executed'
  | 'replayed'
  /** A repeat joined the answer its key's first request was streaming (onConcurrent: attach). */
  | 'attached'
  | 'in_flight'
  | 'mismatch'
  | 'missing_key'
  | 'invalid_key'
  /** A route scoped by a token's claim refused the token (401), or could not get the keys (503). */
  | 'unauthorized'
  | 'too_large'
  /** Refused before its body was read: the bodies in flight filled listen.maxBodyBytesInFlight. */
  | 'busy'
  | 'store_unavailable'
  | 'upstream_error'
  | 'passthrough'
  | 'not_found'
  | 'bad_request'
  | 'client_gone'
  /** An MCP client's notifications/cancelled for a tool call still running: taken, not forwarded. */
  | 'cancel_held'
  /** A long call answered with a handle (an MCP task, a 202 and its monitor): docs/long-calls.md. */
  | 'deferred'
  /** A poll of a long call's handle (tasks/get or tasks/cancel, a status monitor's GET). */
  | 'polled'
  | 'error';

export interface RequestLogEntry {
  route: string | undefined;
  method: string;
  path: string;
  key: string | undefined;
  outcome: OutcomeLabel;
  status: number;
  attempts: number | undefined;
  storeMs: number;
  upstreamMs: number;
  /** Shadow mode (enforce: false): what enforcement would have done instead of forwarding. */
  shadow?:
    | 'would_replay'
    | 'would_reject_in_flight'
    | 'would_wait'
    | 'would_reject_mismatch'
    | 'would_reject_missing_key'
    | 'would_reject_invalid_key'
    | 'would_reject_unauthorized'
    | 'would_reject_too_large'
    | 'would_reject_duplicate_key'
    | 'would_reject_store_unavailable';
  /** True when the answer came from the in-process replay cache (no store round trip). */
  cached?: boolean;
  /** True when a repeat was answered from what this process's first request of the key learnt. */
  coalesced?: boolean;
  /** True when the key was derived from the request (no key header was sent). */
  keyDerived?: boolean;
  /** True when the client hung up before its answer was complete (the result was still stored). */
  clientClosedEarly?: boolean;
  /** Set when the answer says the upstream may or may not have acted (Idempotency-Outcome: unknown). */
  outcomeUnknown?: boolean;
  /**
   * The completion or release after the forward was not simply stored: queued (being sent again in
   * the background), stale (the claim was taken over), failed (given up).
   */
  landing?: 'queued' | 'stale' | 'failed';
  /** What a reconcile probe said of an unknown outcome: found, not_found, or unknown (docs/reconcile.md). */
  reconcile?: 'found' | 'not_found' | 'unknown';
  /** The tool of a protected MCP tools/call. */
  tool?: string;
  /** The target's path as sent (loggedPath: no query, `;` values masked), when the edge rewrote it. */
  rawTarget?: string;
  /** A streamed answer: ms from the request's arrival to the first body byte sent to the client. */
  firstByteMs?: number;
  /** A streamed answer: the bytes of its body sent on (all of them, or how far it got). */
  streamedBytes?: number;
  /** Time spent waiting for an in-flight duplicate (onConcurrent: wait). */
  waitMs: number;
  totalMs: number;
}

export function newLogEntry(method: string, path: string): RequestLogEntry {
  return {
    route: undefined,
    method,
    path,
    key: undefined,
    outcome: 'passthrough',
    status: 0,
    attempts: undefined,
    storeMs: 0,
    upstreamMs: 0,
    waitMs: 0,
    totalMs: 0,
    // Every field present from the start keeps one object shape on the hot path; pino leaves out
    // the undefined ones.
    shadow: undefined,
    keyDerived: undefined,
    cached: undefined,
    coalesced: undefined,
    outcomeUnknown: undefined,
    clientClosedEarly: undefined,
    landing: undefined,
    reconcile: undefined,
    rawTarget: undefined,
    tool: undefined,
    firstByteMs: undefined,
    streamedBytes: undefined,
  };
}

/**
 * A path as the log shows it: the query cut off and the value of every `;` segment parameter
 * replaced by `*` (`/refunds;jsessionid=*`, a bare `;abc` as `;*`, an empty `/..;/` kept).
 * Servlet containers carry the session id there, and a session id is a credential; the names stay,
 * so the log still says why a request was read the way it was.
 */
export function loggedPath(path: string): string {
  const q = path.indexOf('?');
  const bare = q === -1 ? path : path.slice(0, q);
  if (!bare.includes(';')) return bare;
  return bare.replace(/;([^;/=]*)(=[^;/]*)?/g, (_, name: string, value: string | undefined) => {
    if (value !== undefined) return `;${name}=*`;
    return name === '' ? ';' : ';*';
  });
}

export const roundMs = (ms: number): number => Math.round(ms * 100) / 100;
