// The retry policy of idempotentFetch, as pure functions: which answers are worth another attempt
// with the same key, and how long to wait first. It mirrors what the proxy promises (README, "What
// a client sees on a protected route"):
//
//   answer                                   retry?  wait
//   network error / attempt timed out        yes     backoff         (it may have run: same key)
//   409 key in flight (with Retry-After)     yes     Retry-After ≤ maxDelayMs, else backoff
//   409 without Retry-After                  no      (a UCP route's key reused with another body)
//   429, 503                                 yes     Retry-After ≤ maxDelayMs, else backoff
//   502, 504 without Idempotency-Outcome     yes     Retry-After ≤ maxDelayMs, else backoff
//   502, 504 with Idempotency-Outcome: unknown  no   (stored under `fail`: a retry replays it)
//   Idempotent-Replayed: true (any status)   no      (the stored, final answer)
//   anything else: 2xx, 3xx, 400, 413, 422, other 4xx, 500, ...  no

/**
 * How {@link idempotentFetch} retries. Every field is optional; the defaults suit an agent calling
 * a tool through the proxy.
 */
export interface RetryPolicy {
  /** Attempts in all, the first included: an integer ≥ 1. Default 5. */
  readonly maxAttempts?: number;
  /**
   * Backoff base: before retry *n* (1, 2, ...) without a `Retry-After`, wait a random time in
   * `[0, min(maxDelayMs, baseDelayMs × 2^(n-1)))` ("full jitter"). Default 250 ms.
   */
  readonly baseDelayMs?: number;
  /**
   * Cap on every single wait, `Retry-After` included. The proxy's 409 `Retry-After` is the time
   * left on the first request's lease, an upper bound; the first request usually finishes sooner,
   * so polling every `maxDelayMs` gets its answer earlier. Default 5000 ms.
   */
  readonly maxDelayMs?: number;
  /**
   * Budget for the whole call, waits and attempts included. No wait is started that would end past
   * it, and an attempt in progress is aborted when it runs out. Default: no budget.
   */
  readonly maxElapsedMs?: number;
  /**
   * Abort an attempt that has no response head after this long, and retry it with the same key (it
   * may have run: the key is what makes resending it safe). Default: none, so an attempt waits as
   * long as the platform's `fetch` does.
   */
  readonly attemptTimeoutMs?: number;
}

/** A {@link RetryPolicy} with its defaults filled in and its values checked. */
export interface ResolvedRetryPolicy {
  readonly maxAttempts: number;
  readonly baseDelayMs: number;
  readonly maxDelayMs: number;
  readonly maxElapsedMs: number;
  readonly attemptTimeoutMs: number | undefined;
}

/** The defaults of {@link RetryPolicy}. */
export const DEFAULT_RETRY_POLICY: ResolvedRetryPolicy = Object.freeze({
  maxAttempts: 5,
  baseDelayMs: 250,
  maxDelayMs: 5_000,
  maxElapsedMs: Infinity,
  attemptTimeoutMs: undefined,
});

/** Fills in the defaults and rejects nonsense (negative delays, zero attempts). */
export function resolveRetryPolicy(policy: RetryPolicy = {}): ResolvedRetryPolicy {
  const resolved = { ...DEFAULT_RETRY_POLICY, ...withoutUndefined(policy) };
  if (!Number.isSafeInteger(resolved.maxAttempts) || resolved.maxAttempts < 1) {
    throw new RangeError(`retry.maxAttempts must be an integer ≥ 1, got ${resolved.maxAttempts}`);
  }
  for (const name of ['baseDelayMs', 'maxDelayMs'] as const) {
    if (!Number.isFinite(resolved[name]) || resolved[name] < 0) {
      throw new RangeError(`retry.${name} must be a finite number ≥ 0, got ${resolved[name]}`);
    }
  }
  if (!(resolved.maxElapsedMs > 0)) {
    throw new RangeError(`retry.maxElapsedMs must be > 0, got ${resolved.maxElapsedMs}`);
  }
  const timeout = resolved.attemptTimeoutMs;
  if (timeout !== undefined && !(Number.isFinite(timeout) && timeout > 0)) {
    throw new RangeError(`retry.attemptTimeoutMs must be a finite number > 0, got ${timeout}`);
  }
  return Object.freeze(resolved);
}

/** Why an attempt is retried, as reported to `onRetry`. */
export type RetryReason =
  /** `fetch` rejected (connection refused or reset, DNS, TLS): the request may or may not have run. */
  | 'network-error'
  /** No response head within `attemptTimeoutMs`: the request may have run. */
  | 'attempt-timeout'
  /** 409: the first request with this key is still running; its answer will be replayed. */
  | 'in-flight'
  /** 429: rate limited; the proxy released the claim, so the retry executes. */
  | 'rate-limited'
  /** 503: the proxy's store is down (nothing forwarded) or the upstream answered 503 (released). */
  | 'unavailable'
  /** 502/504 without `Idempotency-Outcome: unknown`: nothing reached the upstream. */
  | 'gateway-error';

/** What the policy needs to know about a response. */
export interface ResponseFacts {
  readonly status: number;
  readonly replayed: boolean;
  readonly outcomeUnknown: boolean;
  /**
   * Whether the answer carries `Retry-After`. The proxy's in-flight 409 always does (so does ACP's
   * `idempotency_in_flight`); a 409 without it is final — on a UCP profile route, the key reused
   * with another body. Unset: treated as sent.
   */
  readonly retryAfterSent?: boolean;
}

/** The reason to retry a response, or undefined when the response is the final answer. */
export function retryReasonFor(facts: ResponseFacts): RetryReason | undefined {
  // A replay is the stored answer: every further attempt would get it again.
  if (facts.replayed) return undefined;
  // Under `unknownOutcome: fail` the proxy stored this answer; under `retry` a repeat gets 409
  // until the lease ends. Either way the caller must decide: the upstream may have acted.
  if (facts.outcomeUnknown) return undefined;
  switch (facts.status) {
    case 409:
      return facts.retryAfterSent === false ? undefined : 'in-flight';
    case 429:
      return 'rate-limited';
    case 503:
      return 'unavailable';
    case 502:
    case 504:
      return 'gateway-error';
    default:
      return undefined;
  }
}

/**
 * `Retry-After` (RFC 9110 §10.2.3) in milliseconds from `nowMs`: delay-seconds or an HTTP-date.
 * Undefined when absent or unparseable; never negative.
 */
export function parseRetryAfterMs(value: string | null, nowMs: number): number | undefined {
  if (value === null) return undefined;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  const date = Date.parse(text);
  return Number.isNaN(date) ? undefined : Math.max(0, date - nowMs);
}

/**
 * The wait before retrying after failed attempt number `attempt` (1-based): the server's
 * `Retry-After` when it gave one, else full-jitter exponential backoff; capped at `maxDelayMs`.
 */
export function retryDelayMs(
  attempt: number,
  retryAfterMs: number | undefined,
  policy: ResolvedRetryPolicy,
  random: () => number,
): number {
  if (retryAfterMs !== undefined) return Math.min(retryAfterMs, policy.maxDelayMs);
  const ceiling = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** (attempt - 1));
  return Math.floor(random() * ceiling);
}

function withoutUndefined<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(
    Object.entries(value).filter(([, field]) => field !== undefined),
  ) as Partial<T>;
}
