// idempotentFetch: the global fetch, plus the retry loop an agent needs in front of the proxy. Every
// attempt carries the same key, so the proxy runs the request at most once however many attempts it
// takes; the policy (retry-policy.ts) retries only what can still change, and the result says
// whether the answer was a replay and whether the outcome is unknown.
//
//   attempt 1 ── POST, key k ── times out (it may be running upstream)
//   attempt 2 ── POST, key k ── 409 in flight, Retry-After: 59 ── wait min(59 s, maxDelayMs)
//   attempt 3 ── POST, key k ── 201, Idempotent-Replayed: true  → { replayed: true, attempts: 3 }
import { type ReplayableBody, snapshotBody } from './replayable-body.js';
import {
  type RetryPolicy,
  type RetryReason,
  parseRetryAfterMs,
  resolveRetryPolicy,
  retryDelayMs,
  retryReasonFor,
} from './retry-policy.js';

/** The header the key is sent in unless `keyHeader` says otherwise (the proxy's `key.header`). */
export const DEFAULT_KEY_HEADER = 'Idempotency-Key';
/** The proxy's replay marker unless its `replayedHeader` setting renames it. */
export const DEFAULT_REPLAYED_HEADER = 'Idempotent-Replayed';
/** The header the proxy sets to `unknown` when it cannot know whether the upstream acted. */
export const OUTCOME_HEADER = 'Idempotency-Outcome';

/** The outcome the proxy can flag: `unknown` means the upstream may or may not have acted. */
export type IdempotencyOutcome = 'unknown';

/** What `onRetry` is told before each wait. */
export interface RetryInfo {
  /** The idempotency key, identical on every attempt. */
  readonly key: string;
  /** The request URL. */
  readonly url: string;
  /** The attempt that just failed, from 1. The next attempt is `attempt + 1`. */
  readonly attempt: number;
  /** Why it is retried. */
  readonly reason: RetryReason;
  /** The response status, when there was a response. */
  readonly status?: number;
  /** The rejection, for `network-error` and `attempt-timeout`. */
  readonly error?: unknown;
  /** The server's `Retry-After`, in ms, before the `maxDelayMs` cap; absent when it sent none. */
  readonly retryAfterMs?: number;
  /** How long the helper waits now before the next attempt. */
  readonly delayMs: number;
  /** Time since the call started, in ms. */
  readonly elapsedMs: number;
}

/** Options of {@link idempotentFetch}: the `fetch` options, plus the key and the retry settings. */
export interface IdempotentFetchInit extends Omit<RequestInit, 'body' | 'signal'> {
  /**
   * The key sent with every attempt: 1–255 visible ASCII characters. Derive it with `stepKey` or
   * `businessKey`, or generate a random UUID **once** per action and keep it for its retries.
   */
  readonly idempotencyKey: string;
  /** The body, sent unchanged on every attempt. Streams and `FormData` are rejected. */
  readonly body?: ReplayableBody | null;
  /**
   * Cancels the whole call: an attempt in progress, or a wait between attempts. The promise then
   * rejects with `signal.reason`, as `fetch` does.
   */
  readonly signal?: AbortSignal | null;
  /** When and how often to retry; see {@link RetryPolicy}. */
  readonly retry?: RetryPolicy;
  /** Header to send the key in, if the proxy route's `key.header` is not `Idempotency-Key`. */
  readonly keyHeader?: string;
  /** Replay marker to read, if the proxy's `replayedHeader` is not `Idempotent-Replayed`. */
  readonly replayedHeader?: string;
  /** Called before each wait, e.g. to log the key, attempt and reason. Must not throw. */
  readonly onRetry?: (info: RetryInfo) => void;
  /** The `fetch` to use; default: the global one (Node ≥ 18). */
  readonly fetch?: typeof fetch;
  /** Test hook: waits `ms`, rejecting with `signal.reason` if `signal` aborts. Default: a timer. */
  readonly sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  /** Test hook: a number in [0, 1) for the backoff jitter. Default `Math.random`. */
  readonly random?: () => number;
  /** Test hook: the clock for `maxElapsedMs` and HTTP-date `Retry-After`, in ms. Default `Date.now`. */
  readonly now?: () => number;
}

/** The final answer of {@link idempotentFetch}. */
export interface IdempotentResponse {
  /** The last response, body unread. */
  readonly response: Response;
  /** `response.status`. */
  readonly status: number;
  /**
   * True when the proxy answered from its store (`Idempotent-Replayed: true`): the request ran
   * earlier — in an attempt of this call whose answer was lost, or in an earlier call with this key.
   */
  readonly replayed: boolean;
  /**
   * `'unknown'` when the proxy flagged `Idempotency-Outcome: unknown` (a 502/504: the upstream timed
   * out or dropped the connection after receiving the request). The action may or may not have
   * happened; the proxy will not forward this key again (under `unknownOutcome: fail`), so check the
   * upstream — e.g. look the refund up — before doing anything else.
   */
  readonly outcome: IdempotencyOutcome | undefined;
  /** Attempts made, the last included: 1 when the first answer was final. */
  readonly attempts: number;
  /** The idempotency key that was sent. */
  readonly key: string;
}

/** Why {@link idempotentFetch} gave up without any response. */
export type IdempotentFetchErrorCode = 'ATTEMPTS_EXHAUSTED' | 'TIME_BUDGET_EXHAUSTED';

/**
 * Thrown when every attempt failed without a response (network errors or attempt timeouts) and
 * `maxAttempts` or `maxElapsedMs` ran out. The request may have run: retry later **with the same
 * key** (`error.key`) and the proxy will replay its answer, or run it if it never arrived.
 */
export class IdempotentFetchError extends Error {
  override readonly name = 'IdempotentFetchError';

  constructor(
    /** `ATTEMPTS_EXHAUSTED` or `TIME_BUDGET_EXHAUSTED`. */
    readonly code: IdempotentFetchErrorCode,
    /** The key every attempt carried. */
    readonly key: string,
    /** Attempts made. */
    readonly attempts: number,
    /** The last attempt's rejection. */
    cause: unknown,
  ) {
    super(
      `${code === 'ATTEMPTS_EXHAUSTED' ? 'all attempts failed' : 'time budget exhausted'} without a response ` +
        `after ${attempts} attempt${attempts === 1 ? '' : 's'} (key ${key}); retry later with the same key`,
      { cause },
    );
  }
}

/**
 * `fetch` through the idempotency proxy, retried with the same `Idempotency-Key` until the answer
 * is final.
 *
 * Retried (after `Retry-After`, capped at `maxDelayMs`, else full-jitter backoff): network errors,
 * attempts over `attemptTimeoutMs`, 409 with `Retry-After` (the first request is still running),
 * 429, 503, and 502/504 *without* `Idempotency-Outcome: unknown` (nothing reached the upstream).
 * Final, returned as is: everything else — successes, 400, 413, 422 (a key reused with another
 * body; on an ACP profile route too), a 409 without `Retry-After` (a UCP profile route's key
 * reused) and other 4xx, 500, a replay, and a 502/504 *with*
 * `Idempotency-Outcome: unknown`, which the proxy has stored and would only replay.
 *
 * Resolves with the last response once an answer is final or the attempts or the budget run out
 * (check `status`); rejects with {@link IdempotentFetchError} only if no attempt got a response,
 * with `signal.reason` when `signal` aborts, and with a TypeError for invalid arguments.
 *
 * Use it on the proxy's protected routes: the retries are safe because the proxy runs each key at
 * most once. Against a service without that protection, a retried timeout may run twice.
 *
 * @example
 * ```ts
 * const { response, replayed, outcome, attempts } = await idempotentFetch(`${proxy}/refunds`, {
 *   method: 'POST',
 *   headers: { 'content-type': 'application/json' },
 *   body: JSON.stringify(args), // the arguments saved when the model emitted them
 *   idempotencyKey: stepKey({ runId, step, tool: 'refund_order' }),
 *   retry: { attemptTimeoutMs: 10_000, maxElapsedMs: 60_000 },
 * });
 * if (outcome === 'unknown') throw new Error('refund outcome unknown: check the payments service');
 * ```
 * @param input - an absolute URL. (Not a `Request`: its body is a stream, readable once.)
 * @param init - `fetch` options plus the key, the retry policy and the hooks.
 */
export async function idempotentFetch(
  input: string | URL,
  init: IdempotentFetchInit,
): Promise<IdempotentResponse> {
  const {
    idempotencyKey: key,
    body,
    signal,
    retry,
    keyHeader = DEFAULT_KEY_HEADER,
    replayedHeader = DEFAULT_REPLAYED_HEADER,
    onRetry,
    fetch: fetchImpl = globalThis.fetch,
    sleep = sleepFor,
    random = Math.random,
    now = Date.now,
    headers: headersInit,
    ...requestInit
  } = init;
  requireKey(key);
  const url = requireUrl(input);
  const policy = resolveRetryPolicy(retry);
  const headers = new Headers(headersInit);
  const existing = headers.get(keyHeader);
  if (existing !== null && existing !== key) {
    throw new TypeError(
      `headers already carry ${keyHeader}: ${existing}, which differs from idempotencyKey ${key}; pass the key once`,
    );
  }
  headers.set(keyHeader, key);
  const request: RequestInit = { ...requestInit, headers, body: snapshotBody(body) ?? null };
  const callerSignal = signal ?? undefined;
  const startedAt = now();
  const deadline = startedAt + policy.maxElapsedMs;

  for (let attempt = 1; ; attempt++) {
    callerSignal?.throwIfAborted();
    const timeoutMs = Math.min(policy.attemptTimeoutMs ?? Infinity, Math.max(1, deadline - now()));
    const result = await attemptOnce(fetchImpl, url, request, callerSignal, timeoutMs);

    if ('response' in result) {
      const { response } = result;
      const replayed = isTrue(response.headers.get(replayedHeader));
      const outcome: IdempotencyOutcome | undefined = isUnknown(
        response.headers.get(OUTCOME_HEADER),
      )
        ? 'unknown'
        : undefined;
      const final = {
        response,
        status: response.status,
        replayed,
        outcome,
        attempts: attempt,
        key,
      };
      const retryReason = retryReasonFor({
        status: response.status,
        replayed,
        outcomeUnknown: outcome !== undefined,
        retryAfterSent: response.headers.has('retry-after'),
      });
      if (retryReason === undefined) return final;
      const retryAfterMs = parseRetryAfterMs(response.headers.get('retry-after'), now());
      const delayMs = retryDelayMs(attempt, retryAfterMs, policy, random);
      if (attempt >= policy.maxAttempts || now() + delayMs >= deadline) return final;
      await discard(response);
      onRetry?.({
        key,
        url,
        attempt,
        reason: retryReason,
        status: response.status,
        retryAfterMs,
        delayMs,
        elapsedMs: now() - startedAt,
      });
      await sleep(delayMs, callerSignal);
    } else {
      const delayMs = retryDelayMs(attempt, undefined, policy, random);
      if (attempt >= policy.maxAttempts) {
        throw new IdempotentFetchError('ATTEMPTS_EXHAUSTED', key, attempt, result.error);
      }
      if (now() + delayMs >= deadline) {
        throw new IdempotentFetchError('TIME_BUDGET_EXHAUSTED', key, attempt, result.error);
      }
      onRetry?.({
        key,
        url,
        attempt,
        reason: result.reason,
        error: result.error,
        delayMs,
        elapsedMs: now() - startedAt,
      });
      await sleep(delayMs, callerSignal);
    }
  }
}

type AttemptResult =
  | { readonly response: Response }
  | { readonly error: unknown; readonly reason: 'network-error' | 'attempt-timeout' };

/** One attempt: a fetch bounded by the attempt timeout; classifies a rejection. */
async function attemptOnce(
  fetchImpl: typeof fetch,
  url: string,
  request: RequestInit,
  callerSignal: AbortSignal | undefined,
  timeoutMs: number,
): Promise<AttemptResult> {
  const timeout = Number.isFinite(timeoutMs) ? new AbortController() : undefined;
  const timer =
    timeout &&
    setTimeout(
      () => timeout.abort(new DOMException(`no response within ${timeoutMs} ms`, 'TimeoutError')),
      timeoutMs,
    );
  const signals = [callerSignal, timeout?.signal].filter((s): s is AbortSignal => s !== undefined);
  const signal = signals.length > 1 ? AbortSignal.any(signals) : signals[0];
  try {
    return { response: await fetchImpl(url, { ...request, signal: signal ?? null }) };
  } catch (error) {
    if (callerSignal?.aborted) throw callerSignal.reason;
    if (timeout?.signal.aborted) return { error, reason: 'attempt-timeout' };
    // The fetch standard reports every network error as a TypeError ("fetch failed", with the
    // socket error as its cause). Argument errors are TypeErrors too, but were checked up front.
    if (isTypeError(error)) return { error, reason: 'network-error' };
    throw error;
  } finally {
    clearTimeout(timer);
  }
}

/** Waits `ms`, or rejects with `signal.reason` as soon as `signal` aborts. */
function sleepFor(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** Frees the connection of a response that will not be returned. */
async function discard(response: Response): Promise<void> {
  await response.body?.cancel().catch(() => undefined);
}

/**
 * `instanceof TypeError` fails across realms (Node's built-in fetch throws its own realm's TypeError
 * into a vm context or a jest sandbox), so the name decides.
 */
function isTypeError(error: unknown): boolean {
  if (error instanceof TypeError) return true;
  return (
    typeof error === 'object' &&
    error !== null &&
    (error as { name?: unknown }).name === 'TypeError'
  );
}

function isTrue(value: string | null): boolean {
  return value?.trim().toLowerCase() === 'true';
}

function isUnknown(value: string | null): boolean {
  return value?.trim().toLowerCase() === 'unknown';
}

function requireKey(key: unknown): asserts key is string {
  // The proxy's rule (README, "key"): 1–255 visible ASCII characters; anything else is a 400.
  if (typeof key !== 'string' || !/^[\x21-\x7e]{1,255}$/.test(key)) {
    throw new TypeError(
      `idempotencyKey must be 1–255 visible ASCII characters (e.g. a UUID from stepKey), got ${
        typeof key === 'string' ? JSON.stringify(key) : typeof key
      }`,
    );
  }
}

function requireUrl(input: unknown): string {
  if (typeof input !== 'string' && !(input instanceof URL)) {
    throw new TypeError(
      'idempotentFetch takes a URL string or URL, not a Request: a Request body is a stream and cannot be resent',
    );
  }
  try {
    return new URL(input).href;
  } catch {
    throw new TypeError(
      `idempotentFetch needs an absolute URL, got ${JSON.stringify(String(input))}`,
    );
  }
}
