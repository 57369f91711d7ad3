// Waiting in tests for something that happens asynchronously (a request reaching the upstream, a
// NOTIFY arriving, a log line being written) by polling for it, instead of fixed sleeps that are
// either too short on a slow machine or waste time on a fast one.
//
//   eventually(() => expect(upstream.received).toHaveLength(2));
//   const run = await until(() => server.runs.find((r) => r.key === key), `${key} to run`);
//
// A fixed sleep is still right where the wait is what a test simulates (an upstream's delay, a lease
// or TTL running out) or where the test then asserts that nothing more happens: an absence cannot be
// polled for.

export interface EventuallyOptions {
  /** How long to keep trying before failing (default 5 s). */
  readonly timeoutMs?: number;
  /** The pause between attempts (default 20 ms). */
  readonly intervalMs?: number;
}

const DEFAULT_TIMEOUT_MS = 5_000;
const DEFAULT_INTERVAL_MS = 20;

function pause(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** The loop both helpers share: retry `check` until it returns, or `timedOut` names the failure. */
async function poll<T>(
  check: () => T | Promise<T>,
  options: EventuallyOptions,
  timedOut: (lastError: unknown, waitedMs: number, attempts: number) => Error,
): Promise<T> {
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const intervalMs = options.intervalMs ?? DEFAULT_INTERVAL_MS;
  const started = Date.now();
  for (let attempts = 1; ; attempts++) {
    try {
      return await check();
    } catch (error) {
      const waitedMs = Date.now() - started;
      if (waitedMs >= timeoutMs) throw timedOut(error, waitedMs, attempts);
      await pause(Math.min(intervalMs, timeoutMs - waitedMs));
    }
  }
}

/**
 * Runs `check` (an assertion: it passes by returning, fails by throwing) until it passes, and
 * resolves its value. After `timeoutMs` it rejects with the last failure's message, how long it
 * waited and how many attempts it made; the last failure is the error's `cause`. The check runs at
 * least once, and once more at the deadline, so a slow check still gets its final try.
 */
export function eventually<T>(
  check: () => T | Promise<T>,
  options: EventuallyOptions = {},
): Promise<T> {
  return poll(
    check,
    options,
    (error, waitedMs, attempts) =>
      new Error(`still failing after ${waitedMs} ms (${attempts} attempts): ${messageOf(error)}`, {
        cause: error,
      }),
  );
}

/** Falsy values: what `until` keeps waiting through. */
type Falsy = false | 0 | 0n | '' | null | undefined;

/**
 * Polls `predicate` until it returns a truthy value and resolves that value (so a `find` can be
 * awaited and used). Fails after the deadline with `timed out after N ms waiting for <what>`; a
 * predicate that throws is retried too, and its last error is named.
 */
export function until<T>(
  predicate: () => T | Promise<T>,
  what: string,
  options: EventuallyOptions = {},
): Promise<Exclude<T, Falsy>> {
  const notYet = new Error('not yet');
  return poll(
    async () => {
      const value = await predicate();
      if (!value) throw notYet;
      return value as Exclude<T, Falsy>;
    },
    options,
    (error, waitedMs) =>
      new Error(
        `timed out after ${waitedMs} ms waiting for ${what}` +
          (error === notYet ? '' : ` (last error: ${messageOf(error)})`),
        { cause: error },
      ),
  );
}
