// The REST protocol (README.md#what-a-client-sees-on-a-protected-route): how a protected HTTP
// request is read into a call, and how the proxy's answers are written — problem+json for its own,
// the stored status, headers and body for a replay.
//
//   key ─┬─ sent ─────────────┐
//        ├─ none, derive set ─┤ (derived-key.ts: hashed from the request once its body is read)
//        └─ none / invalid ───┼──► 400, or forwarded unprotected when no key is required
//                             ▼
//   body ─┬─ too large ────────► 413
//         └─ read ─► raw fingerprint ─► the call ─► fingerprint, if memory cannot answer by the
//                                                    bytes (duplicate JSON key ─► 400)
//
// A sent key's fingerprint is computed only if the store asks for it: a repeat of bytes seen
// before is answered by their raw fingerprint (store/coalescing-store.ts). Canonical JSON costs a
// small body's replay more than the rest of its answer, and a megabyte tens of milliseconds.
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import type { IdempotencyPolicy } from '../config/types';
import type { RequestTarget } from '../http/router';
import { ProxyError } from '../errors';
import { BodyTooLargeError, type DigestedBody, readDigestedBodyThen } from '../http/body';
import { sendProblem } from '../http/problem';
import { statusHasBody, writeFlat, writeWhole } from '../http/response';
import { keyInBody, missingKeyDetail } from '../idempotency/body-key';
import { DuplicateJsonKeyError, parseJson } from '../idempotency/canonical-json';
import { DERIVED_KEY_HEADER, deriveKey, derivedKeyPolicy } from '../idempotency/derived-key';
import { computeFingerprint, type FingerprintInput } from '../idempotency/fingerprint';
import { computeRawFingerprint, RAW_FINGERPRINT_MIN_BYTES } from '../idempotency/raw-fingerprint';
import { keyHeaderLines, parseIdempotencyKey } from '../idempotency/key';
import type { HeaderPairs, RecordId, StoredResponse } from '../store/record';
import { attachClient } from '../protected/attach';
import {
  BODY_OMITTED_HEADER,
  type Call,
  expiresHeader,
  OUTCOME_HEADER,
  type ProtectedRequest,
  type Deferral,
  handleToken,
  type ProtocolAdapter,
  readHandleToken,
  recordIdOf,
  UnreadableCall,
  type Verdict,
} from '../protected/protocol';
import { readBodyOrRewind } from '../protected/outgoing';
import { requestProbe } from '../reconcile/http-probe';
import { echoedKey, UpstreamAnswer, withEcho } from './answer';
import { MONITOR_PREFIX, monitorPath, monitorToken } from './monitor';
import { preferredAsync } from './prefer';

import type { HandleState } from '../store/handles';

const EMPTY_BODY = Buffer.alloc(0);

export const REST: ProtocolAdapter<Call> = {
  name: 'rest',
  // Every protected route that names no other protocol.
  serves: () => true,
  read: readRestCall,
  replay(request, call, stored, replayed) {
    if (!replayed) {
      const expires = expiresHeader(stored.expiresAt);
      const echo = echoedKey(request.policy, call.id.key, stored.headers);
      return writeWhole(
        request.res,
        stored.status,
        stored.headers,
        stored.body,
        withEcho(expires, echo),
      );
    }
    writeFlat(request.res, stored.status, replayHead(request.policy, call, stored), stored.body);
    answeredWithoutBody(call);
  },
  refuse(request, call, error) {
    const { policy } = request;
    sendProblem(request.res, error, echoedKey(policy, call.id.key, []), policy.errorShape);
    answeredWithoutBody(call);
  },
  unknownOutcome(call, error) {
    const answer = call.policy.errorShape(error);
    const headers: HeaderPairs = [
      ...answer.headers.filter(([name]) => name !== 'content-length'),
      [OUTCOME_HEADER, 'unknown'],
    ];
    const { status, body } = answer;
    return { status, headers, body, bodyOmitted: false, outcomeUnknown: true };
  },
  reusedDetail:
    'This key was already used with a different request (method, path, query or body). Use a new key for a new request, or resend the original request unchanged to get its stored response.',
  receive: (request, call, _settle, live) => new UpstreamAnswer(request, call, live),
  deferred(request, call, handle) {
    const { policy } = request;
    const location = monitorPath(request.route.name, handleToken(handle, call.id.key));
    const retryAfter = String(Math.max(1, Math.round(policy.async!.pollIntervalMs / 1000)));
    const body = Buffer.from(
      JSON.stringify({
        status: 'running',
        monitor: location,
        retryAfterSeconds: Number(retryAfter),
      }),
    );
    writeWhole(
      request.res,
      202,
      [
        ['content-type', 'application/json'],
        ['preference-applied', 'respond-async'],
        ['location', location],
        ['retry-after', retryAfter],
      ],
      body,
      echoedKey(policy, call.id.key, []),
    );
  },
  attach(request, call, live) {
    const extra: [string, string][] = [[request.policy.replayedHeader, 'true']];
    if (call.keyDerived) extra.push([DERIVED_KEY_HEADER, 'true']);
    return attachClient(request, live, (headers) => [
      ...replayHeaders(headers, request.policy.dropReplayHeaders),
      ...extra,
      ...echoedKey(request.policy, call.id.key, headers),
    ]);
  },
  probe: requestProbe,
};

type Refusal = Extract<Verdict<Call>, { kind: 'refuse' }>;

/** A refusal answered in the route's error shape (problem+json, or its profile's). */
function refusal(
  request: ProtectedRequest,
  error: ProxyError,
  outcome: Refusal['outcome'],
): Refusal {
  return {
    kind: 'refuse',
    outcome,
    answer: (res) => sendProblem(res, error, [], request.policy.errorShape),
  };
}

/**
 * The call in a protected REST request, or what becomes of the request without one: given to
 * `verdict` in the turn the body ended (at once when nothing needs reading), so a repeat memory
 * answers is answered in that turn. `failed`: something broke that is no fault of the request.
 */
function readRestCall(
  request: ProtectedRequest,
  verdict: (verdict: Verdict<Call>) => void,
  failed: (error: unknown) => void,
): void {
  const { req, policy, target } = request;
  if (target.path.startsWith(MONITOR_PREFIX)) return verdict(monitorPoll(request));
  const parsed = parseIdempotencyKey(keyHeaderLines(req, policy.key.header), policy.key.maxLength);
  // No key header on a route with key.body or key.derive: the key is read from the body, or
  // derived, once the body is read. A key that was sent but is invalid is never replaced by another:
  // that would hide a client bug.
  const later =
    !parsed.ok &&
    parsed.problem === 'missing' &&
    (policy.key.derive !== null || policy.key.body !== null);
  if (!parsed.ok && !later) {
    const missing = parsed.problem === 'missing';
    // No key and none required: forwarded unprotected, streamed like any pass-through request.
    if (missing && !policy.key.required)
      return verdict({ kind: 'pass', outcome: { label: 'passthrough' } });
    return verdict(keyRefused(request, missing, parsed.detail, undefined));
  }
  const headerKey = parsed.ok ? parsed.key : undefined;
  readRequestBody(
    request,
    (read) => {
      let call: Verdict<Call>;
      try {
        call = callOf(request, headerKey, read);
      } catch (error) {
        return failed(error);
      }
      verdict(call);
    },
    (error) => verdict(unreadBody(request, headerKey, error)),
  );
}

/** What becomes of a request whose body could not be read whole: too large, or its client left. */
function unreadBody(
  request: ProtectedRequest,
  headerKey: string | undefined,
  error: unknown,
): Verdict<Call> {
  const { route, policy } = request;
  if (!(error instanceof BodyTooLargeError))
    // The client went away mid-body: nothing was claimed, nobody to answer.
    return { kind: 'refuse', outcome: { label: 'error', key: headerKey }, answer: destroy };
  if (!policy.enforce)
    return {
      kind: 'pass',
      outcome: { label: 'passthrough', key: headerKey, shadow: 'would_reject_too_large' },
    };
  const tooLarge = new ProxyError(
    'REQUEST_TOO_LARGE',
    `The request body is larger than this route's limit of ${policy.maxRequestBytes} bytes (maxRequestBytes); send a smaller body.`,
    { route: route.name, key: headerKey },
  );
  return {
    kind: 'refuse',
    outcome: { label: 'too_large', key: headerKey },
    answer: (res) => {
      // The unread rest of the body would be parsed as the next request: close the connection.
      res.shouldKeepAlive = false;
      sendProblem(res, tooLarge, echoedKey(policy, headerKey, []), policy.errorShape);
    },
  };
}

/** The call in a request whose body has been read (`headerKey`: the key its header sent, if any). */
function callOf(
  request: ProtectedRequest,
  headerKey: string | undefined,
  read: DigestedBody,
): Verdict<Call> {
  const { req, route, policy, target } = request;
  const input = new RequestParts(req, target, read);
  let sentKey = headerKey;
  if (sentKey === undefined && policy.key.body !== null) {
    const fromBody = readBodyKey(request, read.body());
    if (!('ok' in fromBody)) return fromBody;
    sentKey = fromBody.key;
  }
  // A sent key's call is matched by its raw fingerprint first, and its fingerprint computed only if
  // memory cannot answer by the bytes. Not in shadow mode, which matches nothing in memory, nor for a
  // derived key, which is hashed from the canonical request anyway.
  if (sentKey !== undefined && policy.enforce) {
    const raw = computeRawFingerprint(
      input,
      policy.fingerprint,
      read.sha256 === undefined ? { bytes: read.body() } : { sha256: read.sha256 },
    );
    const id = recordIdOf(request, policy, sentKey);
    const call = new SentKeyCall(id, policy, raw, read, input, route.name, asyncDeferral(request));
    return { kind: 'protect', call };
  }
  try {
    // A route with key.derive gets here without a key, shadow mode with one. A derived key's
    // record lives for key.window instead of ttl; the rest is as for a sent key.
    const key = sentKey ?? deriveKey(policy.key.derive!, input, policy.fingerprint.ignore);
    const fingerprint = computeFingerprint(input, policy.fingerprint);
    const callPolicy = sentKey === undefined ? derivedKeyPolicy(policy) : policy;
    const id = recordIdOf(request, callPolicy, key);
    const keyDerived = sentKey === undefined;
    const deferral = asyncDeferral(request);
    const body = read.body();
    return {
      kind: 'protect',
      call: { id, policy: callPolicy, keyDerived, fingerprint, body, deferral },
    };
  } catch (error) {
    if (!(error instanceof DuplicateJsonKeyError)) throw error;
    return duplicateKey(request, read.body(), sentKey);
  }
}

/**
 * A key that is missing (and required) or invalid: refused 400; in shadow mode passed on as it
 * would have been refused (streamed when the body is not read yet).
 */
function keyRefused(
  request: ProtectedRequest,
  missing: boolean,
  detail: string,
  body: Buffer | undefined,
): Verdict<Call> {
  if (!request.policy.enforce) {
    const shadow = missing ? 'would_reject_missing_key' : 'would_reject_invalid_key';
    return { kind: 'pass', body, outcome: { label: 'passthrough', shadow } };
  }
  const code = missing ? 'IDEMPOTENCY_KEY_MISSING' : 'IDEMPOTENCY_KEY_INVALID';
  const error = new ProxyError(code, detail, { route: request.route.name });
  return refusal(request, error, { label: missing ? 'missing_key' : 'invalid_key' });
}

/** A body with an object that has a key twice: refused 400, or in shadow mode forwarded unstored. */
function duplicateKey(
  request: ProtectedRequest,
  body: Buffer,
  key: string | undefined,
): Verdict<Call> {
  if (!request.policy.enforce) {
    const outcome = { label: 'executed', key, shadow: 'would_reject_duplicate_key' } as const;
    return { kind: 'pass', body, key, outcome };
  }
  return refusal(request, duplicateKeyError(request.route.name, key), {
    label: 'bad_request',
    key,
  });
}

const destroy = (res: ServerResponse): void => {
  res.destroy();
};

/**
 * The key at key.body in a request sent without a key header: `{ key }` (undefined when the body has
 * none and the route derives one), or what becomes of the request — refused 400, or forwarded
 * unprotected when no key is required.
 */
function readBodyKey(
  request: ProtectedRequest,
  body: Buffer,
): { ok: true; key: string | undefined } | Verdict<Call> {
  const { policy } = request;
  let found;
  try {
    found = keyInBody(parseJson(body), policy.key);
  } catch (error) {
    if (!(error instanceof DuplicateJsonKeyError)) throw error;
    return duplicateKey(request, body, undefined);
  }
  if (found?.ok) return { ok: true, key: found.key };
  if (found === undefined && policy.key.derive !== null) return { ok: true, key: undefined };
  if (found === undefined && !policy.key.required)
    return { kind: 'pass', body, outcome: { label: 'passthrough' } };
  const detail = found === undefined ? missingKeyDetail(policy.key) : found.detail;
  return keyRefused(request, found === undefined, detail, body);
}

function duplicateKeyError(route: string, key: string | undefined): ProxyError {
  return new ProxyError(
    'JSON_DUPLICATE_KEY',
    'The JSON body has an object with the same key twice, which parsers read differently (first or last value), so the proxy cannot know what the upstream would act on. Send each key once.',
    { route, key },
  );
}

/**
 * A call answered with a replay or a refusal is over, and nothing reads its body again: a sent
 * key's call frees the chunks of a body it never joined (the other calls hold theirs whole).
 */
function answeredWithoutBody(call: Call): void {
  if (call instanceof SentKeyCall) call.release();
}

/**
 * A call under a sent key: its raw fingerprint now, its fingerprint and its whole body on first
 * read — a repeat that memory answers by its bytes needs neither (a large body is then never
 * joined from the chunks it arrived in: a megabyte copied for nothing on every repeat). A class, so
 * the getters live on one shared prototype (an accessor defined on each request's object gave each
 * its own hidden class, and a cached replay a third of its throughput in garbage collection).
 */
class SentKeyCall implements Call {
  readonly keyDerived = false;
  private computed: Buffer | undefined;

  constructor(
    readonly id: RecordId,
    readonly policy: IdempotencyPolicy,
    readonly raw: Buffer,
    private readonly read: DigestedBody,
    private readonly input: FingerprintInput,
    private readonly route: string,
    readonly deferral: Deferral | undefined,
  ) {}

  get body(): Buffer {
    return this.read.body();
  }

  /** The call is answered without its body (a replay, a refusal): frees a large body's chunks now. */
  release(): void {
    this.read.release();
  }

  get fingerprint(): Buffer {
    if (this.computed !== undefined) return this.computed;
    try {
      return (this.computed = computeFingerprint(this.input, this.policy.fingerprint));
    } catch (error) {
      if (!(error instanceof DuplicateJsonKeyError)) throw error;
      throw new UnreadableCall(duplicateKeyError(this.route, this.id.key));
    }
  }
}

/**
 * The request as a fingerprint reads it. Its headers are Node's and its body whole, each made on
 * first read: only a rule that names a header reads them (http/header-lines.ts says what building
 * them costs a replay), and only a fingerprint that is computed reads the body.
 */
class RequestParts implements FingerprintInput {
  readonly method: string;
  readonly path: string;
  readonly query: string;
  readonly contentType: string | undefined;

  constructor(
    private readonly req: IncomingMessage,
    target: RequestTarget,
    private readonly read: DigestedBody,
  ) {
    this.method = target.method;
    this.path = target.path;
    this.query = target.query;
    this.contentType = target.headers.contentType;
  }

  get headers(): IncomingHttpHeaders {
    return this.req.headers;
  }

  get body(): Buffer {
    return this.read.body();
  }
}

/** The body: read here, or already by the edge (it looked for a `_method` in it). */
function readRequestBody(
  request: ProtectedRequest,
  done: (body: DigestedBody) => void,
  failed: (error: unknown) => void,
): void {
  const { req, policy, target } = request;
  const early = target.body;
  if (early !== undefined) {
    if (early.length > policy.maxRequestBytes)
      failed(new BodyTooLargeError(policy.maxRequestBytes));
    else done(wholeBody(early));
  } else if (policy.enforce)
    readDigestedBodyThen(
      req,
      policy.maxRequestBytes,
      RAW_FINGERPRINT_MIN_BYTES,
      target.headers.contentLength,
      done,
      failed,
    );
  else readBodyOrRewind(req, policy.maxRequestBytes).then((body) => done(wholeBody(body)), failed);
}

function wholeBody(body: Buffer): DigestedBody {
  return { body: () => body, sha256: undefined, release: () => undefined };
}

/** A replay's head as writeHead takes it, for the route it was made for. */
interface ReplayHead {
  readonly policy: IdempotencyPolicy;
  readonly keyDerived: boolean;
  readonly flat: readonly string[];
}

/**
 * Replay heads, made once per stored answer (and route): a key's repeats are answered from one
 * stored object (the replay cache's, or its first request's), so each repeat writes the same list
 * instead of assembling it anew.
 */
const replayHeads = new WeakMap<StoredResponse, ReplayHead>();

/**
 * The head of a replay: the stored headers a later caller may see, then the replay's own marks
 * (Idempotent-Replayed, Idempotency-Expires, the echoed key, the derived-key and body-omitted
 * marks) and Content-Length.
 */
function replayHead(
  policy: IdempotencyPolicy,
  call: Call,
  stored: StoredResponse,
): readonly string[] {
  const known = replayHeads.get(stored);
  if (known !== undefined && known.policy === policy && known.keyDerived === call.keyDerived)
    return known.flat;
  const flat: string[] = [];
  for (const [name, value] of replayHeaders(stored.headers, policy.dropReplayHeaders))
    flat.push(name, value);
  flat.push(policy.replayedHeader, 'true');
  for (const [name, value] of expiresHeader(stored.expiresAt)) flat.push(name, value);
  for (const [name, value] of echoedKey(policy, call.id.key, stored.headers))
    flat.push(name, value);
  if (call.keyDerived) flat.push(DERIVED_KEY_HEADER, 'true');
  if (stored.bodyOmitted) flat.push(BODY_OMITTED_HEADER, 'true');
  if (statusHasBody(stored.status)) flat.push('content-length', String(stored.body.length));
  replayHeads.set(stored, { policy, keyDerived: call.keyDerived, flat });
  return flat;
}

/**
 * The stored headers a later caller gets: never the stored Date (Node sends the current one: a
 * replay is a new message), never one the route drops (dropReplayHeaders: another caller's
 * challenge or nonce). Usually neither is there, and the stored array is used as is.
 */
function replayHeaders(headers: HeaderPairs, dropped: ReadonlySet<string>): HeaderPairs {
  for (const [name] of headers) {
    if (name === 'date' || dropped.has(name))
      return headers.filter(([other]) => other !== 'date' && !dropped.has(other));
  }
  return headers;
}

/**
 * How a request with `Prefer: respond-async` on a route with idempotency.async may be deferred: after
 * the route's `after`, or sooner when the client's `wait` preference asks for it (RFC 7240 §4.3).
 */
function asyncDeferral(request: ProtectedRequest): Deferral | undefined {
  const async = request.policy.async;
  if (async === null) return undefined;
  const preference = preferredAsync(request.req.headers.prefer);
  if (preference === undefined) return undefined;
  const afterMs =
    preference.waitSeconds === undefined
      ? async.afterMs
      : Math.min(async.afterMs, preference.waitSeconds * 1000);
  return { afterMs, joinRunning: false };
}

/** A GET of a status monitor: a poll of the handle its token names, for this caller's record. */
function monitorPoll(request: ProtectedRequest): Verdict<Call> {
  const { policy, route } = request;
  const token = readHandleToken(monitorToken(request.target.path));
  if (token === undefined) return refusal(request, noMonitor(route.name), { label: 'not_found' });
  const id = recordIdOf(request, policy, token.key);
  const call: Call = { id, policy, keyDerived: false, fingerprint: EMPTY_BODY, body: EMPTY_BODY };
  return {
    kind: 'poll',
    poll: {
      id,
      secret: token.secret,
      unknownOutcome: (error) => REST.unknownOutcome(call, error),
      answer(res, found) {
        if (found === undefined)
          return sendProblem(res, noMonitor(route.name), [], policy.errorShape);
        if (found.kind === 'done') return REST.replay(request, call, found.response, true);
        writeRunning(request, found);
      },
      fail: (res, error) => sendProblem(res, error, [], policy.errorShape),
    },
  };
}

/** The monitor of a call still running: 202 and when to look again. */
function writeRunning(request: ProtectedRequest, found: HandleState): void {
  const seconds = Math.max(1, Math.round(request.policy.async!.pollIntervalMs / 1000));
  const body = Buffer.from(
    JSON.stringify({ status: 'running', since: new Date(found.handle.createdAt).toISOString() }),
  );
  writeWhole(
    request.res,
    202,
    [
      ['content-type', 'application/json'],
      ['retry-after', String(seconds)],
      ['cache-control', 'no-store'],
    ],
    body,
  );
}

function noMonitor(route: string): ProxyError {
  return new ProxyError(
    'MONITOR_NOT_FOUND',
    'There is no status monitor at this address for you: its link is not one this proxy gave, it belongs to another caller, or the answer it watched has expired. Retry the original request with its key to get its answer.',
    { route },
  );
}
