// A protected REST request up to its claim (README.md#what-a-client-sees-on-a-protected-route): the
// key (sent, or derived once the body is read), the body, the fingerprint — then decide.ts answers
// it or forwards it under its claim.
//
//   key ─┬─ sent ─────────────┐
//        ├─ none, derive set ─┤ (derived-key.ts: hashed from the request once its body is read)
//        └─ none / invalid ───┼──► 400, or forwarded unprotected when no key is required
//                             ▼
//   body ─┬─ too large ────────► 413
//         └─ read ─► large repeat seen before? (raw fingerprint) ─► replay
//                    fingerprint (duplicate JSON key ─► 400) ─► decide.ts
//
// Shadow mode (enforce: false, shadow.ts) forwards wherever enforcement would answer for the
// upstream (400, 413, 503, replay, 409, 422), and only logs what it would have done.
//
// The response is stored before the client sees its last byte, so once a client has a whole answer,
// every retry replays it.
import { ProxyError } from '../errors';
import { BodyTooLargeError, type DigestedBody, readDigestedBody } from '../http/body';
import { deriveKey, derivedKeyPolicy } from '../idempotency/derived-key';
import { DuplicateJsonKeyError } from '../idempotency/canonical-json';
import {
  computeFingerprint,
  computeRawFingerprint,
  type FingerprintInput,
  RAW_FINGERPRINT_MIN_BYTES,
} from '../idempotency/fingerprint';
import { keyHeaderLines, type KeyParseResult, parseIdempotencyKey } from '../idempotency/key';
import { problem } from './answer';
import { type ProtectedDeps, type ProtectedRequest } from './context';
import { answerCall, recordIdOf } from './decide';
import { answerByRaw } from './follow-leader';
import { respond } from './respond';
import { forwardUnstored, passThroughInShadow, readBodyOrRewind } from './shadow';

export type { ProtectedDeps, ProtectedObserver, ProtectedRequest } from './context';

const EMPTY_BODY = Buffer.alloc(0);

function wholeBody(body: Buffer): DigestedBody {
  return { body: () => body, sha256: undefined };
}

export async function handleProtectedRequest(
  deps: ProtectedDeps,
  request: ProtectedRequest,
): Promise<void> {
  const { req, res, route, policy, log } = request;

  const parsed = parseIdempotencyKey(keyHeaderLines(req, policy.key.header), policy.key.maxLength);
  // No key header on a route with key.derive: the key is derived once the body is read. A key that
  // was sent but is invalid is never replaced by a derived one: that would hide a client bug.
  const derivesKey = !parsed.ok && parsed.problem === 'missing' && policy.key.derive !== null;
  if (!parsed.ok && !derivesKey) return refuseKey(deps, request, parsed);
  if (parsed.ok) log.key = parsed.key;

  let read: DigestedBody;
  try {
    read = await readRequestBody(request);
  } catch (error) {
    if (!(error instanceof BodyTooLargeError)) {
      // The client went away mid-body: nothing was claimed, nobody to answer.
      log.outcome = 'error';
      res.destroy();
      return;
    }
    if (!policy.enforce) return passThroughInShadow(deps, request, 'would_reject_too_large');
    // The unread rest of the body would be parsed as the next request: close the connection.
    res.shouldKeepAlive = false;
    return respond(
      request,
      problem(
        'too_large',
        new ProxyError(
          'REQUEST_TOO_LARGE',
          `The request body is larger than this route's limit of ${policy.maxRequestBytes} bytes (maxRequestBytes); send a smaller body.`,
          { route: route.name, key: log.key },
        ),
      ),
    );
  }

  const input: FingerprintInput = {
    method: request.target.method,
    path: request.target.path,
    query: request.target.query,
    headers: req.headers,
    body: EMPTY_BODY,
    contentType: req.headers['content-type'],
  };
  // A repeat of a large body is first looked up by its raw fingerprint (the SHA-256 of its bytes,
  // taken as they arrived): a body seen before needs no canonical JSON, which costs tens of
  // milliseconds a megabyte, and is not even joined into one buffer.
  let raw: Buffer | undefined;
  if (parsed.ok && read.sha256 !== undefined) {
    raw = computeRawFingerprint(input, policy.fingerprint, read.sha256);
    const answer = await answerByRaw(deps, request, recordIdOf(request, parsed.key), raw);
    if (answer !== undefined) return respond(request, answer);
  }
  const body = read.body();
  input.body = body;
  // Only a route with key.derive gets here without a key (refuseKey took every other keyless
  // request). A derived key's record lives for key.window instead of ttl; the rest is as for a sent
  // key.
  let key: string;
  let fingerprint: Buffer;
  try {
    key = parsed.ok ? parsed.key : deriveKey(policy.key.derive!, input, policy.fingerprint.ignore);
    fingerprint = computeFingerprint(input, policy.fingerprint);
  } catch (error) {
    if (!(error instanceof DuplicateJsonKeyError)) throw error;
    const sentKey = parsed.ok ? parsed.key : undefined;
    if (!policy.enforce)
      return forwardUnstored(deps.upstreams, request, sentKey, body, 'would_reject_duplicate_key');
    return respond(
      request,
      problem(
        'bad_request',
        new ProxyError(
          'JSON_DUPLICATE_KEY',
          'The JSON body has an object with the same key twice, which parsers read differently (first or last value), so the proxy cannot know what the upstream would act on. Send each key once.',
          { route: route.name, key: sentKey },
        ),
      ),
    );
  }
  if (parsed.ok)
    return answerCall(deps, request, { id: recordIdOf(request, key), fingerprint, body, raw });
  log.key = key;
  log.keyDerived = true;
  const derived = { ...request, policy: derivedKeyPolicy(policy) };
  return answerCall(deps, derived, { id: recordIdOf(derived, key), fingerprint, body });
}

/** The body: read here, or already by the edge (it looked for a `_method` in it). */
async function readRequestBody(request: ProtectedRequest): Promise<DigestedBody> {
  const { req, policy } = request;
  const early = request.target.body;
  if (early !== undefined) {
    if (early.length > policy.maxRequestBytes) throw new BodyTooLargeError(policy.maxRequestBytes);
    return wholeBody(early);
  }
  return policy.enforce
    ? readDigestedBody(req, policy.maxRequestBytes, RAW_FINGERPRINT_MIN_BYTES)
    : wholeBody(await readBodyOrRewind(req, policy.maxRequestBytes));
}

/**
 * No usable key and none to derive: forwarded unprotected when no key is required, else 400 (in
 * shadow mode: forwarded anyway).
 */
function refuseKey(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  parsed: Extract<KeyParseResult, { ok: false }>,
): void {
  const { route, policy, log } = request;
  const missing = parsed.problem === 'missing';
  if (missing && !policy.key.required) {
    // No key and none required: forwarded unprotected, streamed like any pass-through request.
    log.outcome = 'passthrough';
    deps.passThrough.web(request.req, request.res, route, request.target, request.trace);
    return;
  }
  if (!policy.enforce) {
    return passThroughInShadow(
      deps,
      request,
      missing ? 'would_reject_missing_key' : 'would_reject_invalid_key',
    );
  }
  respond(
    request,
    problem(
      missing ? 'missing_key' : 'invalid_key',
      new ProxyError(
        missing ? 'IDEMPOTENCY_KEY_MISSING' : 'IDEMPOTENCY_KEY_INVALID',
        parsed.detail,
        { route: route.name },
      ),
    ),
  );
}
