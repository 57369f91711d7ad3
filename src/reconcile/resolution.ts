// What the protected pipeline may ask of reconciliation (docs/reconcile.md), as types only: the
// pipeline holds a Prober in its deps, reconciler.ts is the one that probes. How a probe is made is
// the protocol's (ReconcileProbe): each adapter brings its own, and the reconciler is handed them.
import type { IncomingHttpHeaders } from 'node:http';
import type { IdempotencyPolicy, ReconcilePolicy, RouteConfig } from '../config/types';
import type { RecordId, StoredResponse } from '../store/record';
import type { UpstreamPools } from '../upstream/protected';
import type { ProbeVerdict } from './verdict';

/** What became of an unknown outcome a request or the sweep looked at. */
export type Resolution =
  | { readonly kind: 'found'; readonly response: StoredResponse }
  | { readonly kind: 'not-found' }
  /** Still unknown; the next probe is due in retryAfterMs (null: no more probes). */
  | { readonly kind: 'unknown'; readonly retryAfterMs: number | null }
  /** No unknown outcome under the key any more (resolved or cleared meanwhile): claim again. */
  | { readonly kind: 'gone' };

/** What one probe needs: where to ask, under which rules, and about which call. */
export interface ProbeRequest {
  readonly upstreams: UpstreamPools;
  readonly route: RouteConfig;
  readonly reconcile: ReconcilePolicy;
  /** The key as the upstream received it with the original (forwardKeyAs, key.forward). */
  readonly key: string;
  /** The original request's body, as kept with the unknown outcome (null: none was kept). */
  readonly body: Buffer | null;
  /** The triggering retry's headers; undefined in the background sweep. */
  readonly retryHeaders: IncomingHttpHeaders | undefined;
}

/**
 * How one protocol asks its upstream whether an unknown outcome happened; rejects when there is
 * no answer to read (the upstream failed, a template the body cannot fill).
 */
export type ReconcileProbe = (request: ProbeRequest) => Promise<ProbeVerdict>;

/** What a probe said, as a request's log line shows it. */
export type ReconcileLabel = 'found' | 'not_found' | 'unknown';

export type ReconcilingPolicy = IdempotencyPolicy & { readonly reconcile: ReconcilePolicy };

export interface Prober {
  /**
   * Keeps what the probe needs with the unknown outcome just stored under `claimToken`; returns how
   * long until its first probe, or null when the record moved on meanwhile.
   */
  keep(
    policy: ReconcilePolicy,
    id: RecordId,
    claimToken: string,
    body: Buffer,
  ): Promise<number | null>;
  /** A retry met the unknown outcome: probe now if it is due (bounded by the upstream's timeout). */
  resolve(
    route: RouteConfig,
    policy: ReconcilingPolicy,
    id: RecordId,
    upstreams: UpstreamPools,
    retryHeaders: IncomingHttpHeaders,
  ): Promise<Resolution>;
}
