// Store failures in the log: one line when they start, then at most one summary line a second while
// they go on — not a stack trace per request. A storm of 5000 requests against a busy pool or a
// database that went away is one incident, and the log has to stay readable while it lasts.
import type { Logger } from 'pino';
import { storeFailureKind } from '../db/store-failure';

const SUMMARY_EVERY_MS = 1_000;

interface Window {
  failures: number;
  readonly byKind: Record<string, number>;
  readonly byOperation: Record<string, number>;
  lastError: string;
}

export function storeErrorLog(
  logger: Logger,
  everyMs = SUMMARY_EVERY_MS,
  /** What to change, when the error says (a TLS refusal: tls-problem.ts). */
  hintOf: (error: unknown) => string | undefined = () => undefined,
): (error: unknown, operation: string) => void {
  let window: Window | undefined;
  const summarise = (): void => {
    const current = window!;
    if (current.failures === 0) {
      window = undefined;
      return;
    }
    logger.error(
      {
        failures: current.failures,
        byKind: current.byKind,
        byOperation: current.byOperation,
        lastError: current.lastError,
      },
      `idempotency store operations failed ${current.failures} more times in the last ${everyMs} ms`,
    );
    window = { failures: 0, byKind: {}, byOperation: {}, lastError: '' };
    setTimeout(summarise, everyMs).unref();
  };
  return (error, operation) => {
    const kind = storeFailureKind(error);
    const message = error instanceof Error ? error.message : String(error);
    if (window === undefined) {
      const hint = hintOf(error);
      logger.error(
        {
          operation,
          kind,
          error: message,
          code: (error as { code?: unknown }).code,
          ...(hint === undefined ? {} : { hint }),
        },
        kind === 'pool_busy'
          ? 'idempotency store: every pool connection is busy (answering 503 STORE_BUSY)'
          : 'idempotency store operation failed (answering 503 STORE_UNAVAILABLE)',
      );
      window = { failures: 0, byKind: {}, byOperation: {}, lastError: '' };
      setTimeout(summarise, everyMs).unref();
      return;
    }
    window.failures++;
    window.byKind[kind] = (window.byKind[kind] ?? 0) + 1;
    window.byOperation[operation] = (window.byOperation[operation] ?? 0) + 1;
    window.lastError = message;
  };
}
