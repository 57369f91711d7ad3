// Resolves unknown outcomes by asking the upstream (docs/reconcile.md): inline, when a retry meets
// a due unknown outcome, and in a background sweep. Every probe goes through probeTicket: the
// record is taken first (reconcile-store.ts), so one probe per record per period whatever asks, and
// what the probe found is written with the ticket's token.
//
// A probe that cannot be made or read (a template naming a field the body lacks, a non-JSON answer
// where a pointer is needed, an upstream that is down or slow, a status the rules do not name)
// leaves the record unknown, due again later, and logs why. It never releases it.
import { createHash } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import type { Logger } from 'pino';
import type { IdempotencyPolicy, ProxyConfig, ReconcilePolicy, RouteConfig } from '../config/types';
import type {
  GivenUp,
  ProbeTake,
  ProbeTicket,
  ProbeTiming,
  ReconcileStore,
} from '../store/postgres/reconcile-store';
import type { RecordId } from '../store/record';
import type { UpstreamPools } from '../upstream/protected';
import { scopedKeyOf } from '../idempotency/scope';
import { requestProbe } from './http-probe';
import type { ProbeVerdict } from './verdict';
import type { Prober, ReconcileProbe, ReconcilingPolicy, Resolution } from './resolution';
import { within } from '../timeout';

/**
 * How probes end, as metrics count them; `gave_up` is no probe: a record past giveUpAfter, counted
 * once when it is given up.
 */
export type ProbeResult = 'found' | 'not_found' | 'inconclusive' | 'failed' | 'gave_up';

export interface ReconcileObserver {
  probed(route: string, result: ProbeResult): void;
}

export interface SweepResult {
  readonly probed: number;
  readonly found: number;
  readonly notFound: number;
  readonly unknown: number;
  /** Records given up in this sweep (past giveUpAfter). */
  readonly gaveUp: number;
  /** Routes whose sweep another instance was running. */
  readonly skipped: number;
}

/** Records a sweep takes per route and round. */
const SWEEP_BATCH = 100;

export class Reconciler implements Prober {
  constructor(
    private readonly store: ReconcileStore,
    private readonly logger: Logger,
    private readonly observer?: ReconcileObserver,
    /**
     * The route's probe: its protocol adapter's (src/protocols.ts hands them in). Without one, every
     * route is asked with an HTTP request, as a REST route is.
     */
    private readonly probeOf: (route: RouteConfig) => ReconcileProbe | undefined = () =>
      requestProbe,
  ) {}

  /**
   * Keeps what the probe needs with the unknown outcome just stored under `claimToken`; returns how
   * long until its first probe, or null when the record moved on meanwhile.
   */
  keep(
    policy: ReconcilePolicy,
    id: RecordId,
    claimToken: string,
    body: Buffer,
  ): Promise<number | null> {
    return this.store.keep(id, claimToken, body, policy.afterMs);
  }

  /** A retry met the unknown outcome: probe now if it is due (bounded by the upstream's timeout). */
  async resolve(
    route: RouteConfig,
    policy: ReconcilingPolicy,
    id: RecordId,
    upstreams: UpstreamPools,
    retryHeaders: IncomingHttpHeaders,
  ): Promise<Resolution> {
    const timing = timingOf(route, policy.reconcile);
    const take: ProbeTake = await this.store.take(id, timing);
    if (take.kind === 'gone') return take;
    if (take.kind === 'not-due' && take.dueInMs === null) {
      const givenUp = await this.store.giveUp(id, timing);
      if (givenUp !== null) this.gaveUp(route, policy, givenUp);
    }
    if (take.kind === 'not-due') return { kind: 'unknown', retryAfterMs: take.dueInMs };
    return this.probeTicket(route, policy, take.ticket, upstreams, retryHeaders);
  }

  /** One sweep of the routes with reconcile that `pick` names (the sweeper's: those due). */
  async sweep(
    config: ProxyConfig,
    upstreams: UpstreamPools,
    pick: (route: RouteConfig) => boolean,
  ): Promise<SweepResult> {
    const totals = { probed: 0, found: 0, notFound: 0, unknown: 0, gaveUp: 0, skipped: 0 };
    for (const route of config.routes) {
      const policy = route.idempotency;
      if (!policy?.reconcile || !pick(route)) continue;
      const reconciling = policy as ReconcilingPolicy;
      // Records carry the route that claimed them: a group's records are swept by their own route.
      const taken = await this.store.takeDue(
        route.name,
        timingOf(route, reconciling.reconcile),
        SWEEP_BATCH,
      );
      if (taken === undefined) {
        totals.skipped++;
        continue;
      }
      for (const givenUp of taken.givenUp) this.gaveUp(route, reconciling, givenUp);
      totals.gaveUp += taken.givenUp.length;
      for (const ticket of taken.tickets) {
        totals.probed++;
        const resolution = await this.probeTicket(route, reconciling, ticket, upstreams, undefined);
        if (resolution.kind === 'found') totals.found++;
        else if (resolution.kind === 'not-found') totals.notFound++;
        else totals.unknown++;
      }
    }
    return totals;
  }

  private async probeTicket(
    route: RouteConfig,
    policy: ReconcilingPolicy,
    ticket: ProbeTicket,
    upstreams: UpstreamPools,
    retryHeaders: IncomingHttpHeaders | undefined,
  ): Promise<Resolution> {
    const reconcile = policy.reconcile;
    const key = forwardedKey(policy, ticket.id);
    const fields = {
      route: route.name,
      key: logKeyOf(policy, ticket.id.key),
      probes: ticket.probes,
    };
    let verdict: ProbeVerdict;
    try {
      const probe = this.probeOf(route);
      if (probe === undefined) throw new Error(`route ${route.name} has no probe`);
      const asking = probe({ upstreams, route, reconcile, key, body: ticket.body, retryHeaders });
      verdict = await withinTimeout(asking, route.upstream.timeoutMs);
    } catch (error) {
      this.observer?.probed(route.name, 'failed');
      this.logger.warn(
        { ...fields, reason: reasonOf(error) },
        'reconcile: the probe failed; the outcome stays unknown and is probed again later',
      );
      return this.stillUnknown(route, policy, ticket.id);
    }
    switch (verdict.kind) {
      case 'found': {
        const expiresAt = await this.store.found(ticket, verdict.response);
        if (expiresAt === null) return { kind: 'gone' };
        this.observer?.probed(route.name, 'found');
        this.logger.info(
          { ...fields, status: verdict.response.status },
          'reconcile: the upstream has the call; its answer is stored and replayed',
        );
        return { kind: 'found', response: { ...verdict.response, expiresAt } };
      }
      case 'not-found': {
        if (!(await this.store.notFound(ticket))) return { kind: 'gone' };
        this.observer?.probed(route.name, 'not_found');
        this.logger.info(
          fields,
          'reconcile: the upstream never had the call; the key is released and its next request runs',
        );
        return { kind: 'not-found' };
      }
      case 'inconclusive':
        this.observer?.probed(route.name, 'inconclusive');
        this.logger.warn(
          { ...fields, reason: verdict.reason },
          'reconcile: the probe could not tell; the outcome stays unknown and is probed again later',
        );
        return this.stillUnknown(route, policy, ticket.id);
    }
  }

  /** Tells of a record given up: one line and one count per record, whoever gave it up. */
  private gaveUp(route: RouteConfig, policy: ReconcilingPolicy, givenUp: GivenUp): void {
    this.observer?.probed(route.name, 'gave_up');
    this.logger.warn(
      {
        route: route.name,
        key: logKeyOf(policy, givenUp.id.key),
        probes: givenUp.probes,
        ageMs: givenUp.ageMs,
      },
      'reconcile: gave up after giveUpAfter; the outcome stays unknown for an operator (console, clear)',
    );
  }

  /** The record stays unknown: when its next probe is due. */
  private async stillUnknown(
    route: RouteConfig,
    policy: ReconcilingPolicy,
    id: RecordId,
  ): Promise<Resolution> {
    const due = await this.store.dueIn(id, timingOf(route, policy.reconcile));
    return { kind: 'unknown', retryAfterMs: due.kind === 'not-due' ? due.dueInMs : null };
  }
}

/** Room after a probe's deadline for writing what it found, within the hold it took. */
const WRITE_MARGIN_MS = 1_000;

/**
 * How probes of a route are spaced: never before `after`, and a taken probe holds the record for one
 * sweep period (or `after`, when only retries probe), doubled per probe — and always longer than the
 * probe may take (the upstream's timeout) and its write, so no other probe starts while it runs.
 */
export function timingOf(route: RouteConfig, reconcile: ReconcilePolicy): ProbeTiming {
  return {
    afterMs: reconcile.afterMs,
    giveUpAfterMs: reconcile.giveUpAfterMs,
    holdMs: Math.max(
      reconcile.everyMs || reconcile.afterMs,
      route.upstream.timeoutMs + WRITE_MARGIN_MS,
    ),
  };
}

/**
 * The probe's answer, or a failure once the upstream's timeout has passed: undici's own timers may
 * fire late, and a probe must be over before its hold ends.
 */
async function withinTimeout<T>(asking: Promise<T>, timeoutMs: number): Promise<T> {
  asking.catch(() => undefined); // a probe past its deadline may still fail: nobody waits for it
  return within(asking, timeoutMs, () => {
    throw new Error(`the probe got no answer within the upstream's timeout (${timeoutMs} ms)`);
  });
}

/** The key as the upstream received it with the original (forwardKeyAs, key.forward). */
export function forwardedKey(policy: IdempotencyPolicy, id: RecordId): string {
  return policy.key.forward === 'scoped' ? scopedKeyOf(id) : id.key;
}

function reasonOf(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    return typeof code === 'string' ? `${code}: ${error.message}` : error.message;
  }
  return String(error);
}

function logKeyOf(policy: IdempotencyPolicy, key: string): string {
  return policy.logKey === 'hash' ? hashed(key) : key;
}

function hashed(key: string): string {
  return `sha256:${createHash('sha256').update(key).digest('hex').slice(0, 16)}`;
}
