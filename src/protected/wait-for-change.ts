// onConcurrent: wait — blocking a repeat until the in-flight record it repeats changes.
import type { ServerResponse } from 'node:http';
import { performance } from 'node:perf_hooks';
import { type RecordId, recordDigest } from '../store/record';
import { type ProtectedDeps, type ProtectedRequest } from './context';

/** How often a waiting request looks at its record when no notification comes. */
const WAIT_POLL_MS = 500;

export type WaitResult =
  | { readonly kind: 'changed' }
  | { readonly kind: 'timeout'; readonly leaseRemainingMs: number }
  | { readonly kind: 'client-gone' };

/**
 * onConcurrent: wait. Blocks until the in-flight record completes, is released, or its lease ends
 * (then the claim loop replays, executes or takes over), woken by NOTIFY with polling as the backstop.
 * Holds no database connection while waiting, and stops as soon as the client hangs up.
 */
export async function waitForChange(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  id: RecordId,
  fingerprint: Buffer,
  deadline: number,
): Promise<WaitResult> {
  const digest = recordDigest(id);
  const gone = clientGone(request.res);
  for (;;) {
    const subscription = deps.waiter?.waitFor(digest);
    let timer: NodeJS.Timeout | undefined;
    try {
      // Look after subscribing, so a completion between the claim and now is not missed.
      const seen = await deps.store.peek(id, fingerprint);
      if (seen.kind !== 'in-flight' || seen.leaseRemainingMs === 0) return { kind: 'changed' };
      const left = deadline - performance.now();
      if (left <= 0) return { kind: 'timeout', leaseRemainingMs: seen.leaseRemainingMs };
      const pause = new Promise<'poll'>((resolve) => {
        timer = setTimeout(
          () => resolve('poll'),
          Math.min(left, WAIT_POLL_MS, seen.leaseRemainingMs),
        );
      });
      const woke = await Promise.race([pause, gone, subscription?.changed ?? pause]);
      if (woke === 'gone') return { kind: 'client-gone' };
    } finally {
      clearTimeout(timer);
      subscription?.cancel();
    }
  }
}

/** Resolves once the client's connection has closed. */
export function clientGone(res: ServerResponse): Promise<'gone'> {
  if (res.destroyed) return Promise.resolve('gone');
  return new Promise((resolve) => res.once('close', () => resolve('gone')));
}
