// Where a protected request meets reconciliation (docs/reconcile.md), on routes with
// idempotency.reconcile: an unknown outcome just stored keeps what its probe needs, and a repeat
// that finds one asks the upstream (once per request) before it is answered. The probe itself is
// the reconciler's (reconcile/reconciler.ts), behind ProtectedDeps: the pipeline only learns what
// to answer — the upstream's answer, the unknown outcome with Retry-After, or "claim again".
import type { ReconcileLabel, ReconcilingPolicy } from '../reconcile/resolution';
import type { StoredResponse } from '../store/record';
import type { IncomingHttpHeaders } from 'node:http';
import type { RouteConfig } from '../config/types';
import type { Call, ProtectedDeps } from './protocol';

export type ReconcileStep =
  | { readonly kind: 'answer'; readonly response: StoredResponse; readonly label?: ReconcileLabel }
  /** The upstream never had the call (or the record was resolved meanwhile): claim the key again. */
  | { readonly kind: 'claim-again'; readonly label?: ReconcileLabel };

/** True when the call's route resolves unknown outcomes with a probe. */
export function reconciles(deps: ProtectedDeps, call: Call): boolean {
  return deps.reconciler !== undefined && call.policy.reconcile !== null && call.policy.enforce;
}

/**
 * Keeps what the probe needs with the unknown outcome just stored under `claimToken`; returns the
 * answer to send with Retry-After at its first probe. A failure here is logged, never the client's:
 * the record stays unknown (and a probe without the body still runs when its template needs none).
 * A completion still `queued` has not landed: the store keeps the body once it does
 * (keepOnceLanded), and the first probe is due at most `after` from now.
 */
export async function keepForProbe(
  deps: ProtectedDeps,
  call: Call,
  claimToken: string,
  stored: StoredResponse,
  queued = false,
): Promise<StoredResponse> {
  const reconcile = call.policy.reconcile;
  if (!reconciles(deps, call) || reconcile === null) return stored;
  if (queued) return withRetryAfter(stored, reconcile.afterMs);
  try {
    const dueInMs = await deps.reconciler!.keep(reconcile, call.id, claimToken, call.body);
    return dueInMs === null ? stored : withRetryAfter(stored, dueInMs);
  } catch (error) {
    deps.onStoreError(error, 'reconcile keep');
    return stored;
  }
}

/**
 * The keep as a write that follows the unknown outcome's completion into the record, for the store
 * to make when that completion is queued (KeyStore.complete's followUp), so the record ends as one
 * stored at once does. Its failure fails the write, which the store's outbox then sends again.
 */
export function keepOnceLanded(
  deps: ProtectedDeps,
  call: Call,
  claimToken: string,
): (() => Promise<unknown>) | undefined {
  const reconcile = call.policy.reconcile;
  if (!reconciles(deps, call) || reconcile === null) return undefined;
  return () => deps.reconciler!.keep(reconcile, call.id, claimToken, call.body);
}

/**
 * A repeat found an unknown outcome on a route that reconciles: probe it if due, and say what to
 * answer. Of the repeat it needs only its route and its headers (a probe with no configured headers
 * is sent with the repeat's own authorization).
 */
export async function reconcileReplay(
  deps: ProtectedDeps,
  route: RouteConfig,
  headers: IncomingHttpHeaders,
  call: Call,
  stored: StoredResponse,
): Promise<ReconcileStep> {
  const policy = call.policy as ReconcilingPolicy;
  try {
    const resolution = await deps.reconciler!.resolve(
      route,
      policy,
      call.id,
      deps.upstreams,
      headers,
    );
    switch (resolution.kind) {
      case 'found':
        return { kind: 'answer', response: resolution.response, label: 'found' };
      case 'not-found':
        return { kind: 'claim-again', label: 'not_found' };
      case 'gone':
        return { kind: 'claim-again' };
      case 'unknown':
        return {
          kind: 'answer',
          response:
            resolution.retryAfterMs === null
              ? stored
              : withRetryAfter(stored, resolution.retryAfterMs),
          label: 'unknown',
        };
    }
  } catch (error) {
    deps.onStoreError(error, 'reconcile');
    return { kind: 'answer', response: stored, label: 'unknown' };
  }
}

/** The unknown-outcome answer with Retry-After: when the next probe may tell. */
function withRetryAfter(stored: StoredResponse, dueInMs: number): StoredResponse {
  const seconds = Math.max(1, Math.ceil(dueInMs / 1000));
  return {
    ...stored,
    headers: [
      ...stored.headers.filter(([name]) => name !== 'retry-after'),
      ['retry-after', String(seconds)],
    ],
  };
}
