// What the admin listener and its JSON API are given by the process that serves them.
import type { Logger } from 'pino';
import type { Pool } from 'pg';
import type { ProxyConfig } from '../config/types';
import type { EmbeddedStatus } from '../embedded/embedded-supervisor';
import type { RecordId } from '../store/record';

/** Whether the replay cache answers now, for /readyz (docs/admin-and-console.md). */
export type ReplayCacheStatus =
  | { readonly state: 'on'; readonly provenMsAgo: number }
  | { readonly state: 'off'; readonly reason: string }
  | { readonly state: 'disabled' };
import type { OutcomeCounters } from '../observability/outcome-ring';

export interface AdminDeps {
  /** The config in force (it changes on reload). */
  readonly config: () => ProxyConfig;
  readonly pool: Pool;
  readonly metrics: AdminMetrics;
  readonly draining: () => boolean;
  /** Refreshes gauges that are read rather than counted (e.g. waiting requests) before a scrape. */
  readonly beforeScrape?: () => void;
  /** Where operator actions (a clear) are logged; never with the token. */
  readonly logger?: Pick<Logger, 'info' | 'warn'>;
  /**
   * Drops cleared records from the memory of every process that answers clients, before the clear
   * is answered: this process's replay cache, or on a cluster's primary every worker's (asked over
   * IPC: cluster/cluster-forget.ts, which says how that went). Undefined: no such memory.
   */
  readonly forgetRecords?: (ids: readonly RecordId[]) => Promise<WorkersForgot | undefined>;
  /** The replay cache's state, shown by /readyz. */
  readonly replayCache?: () => ReplayCacheStatus;
  /** The embedded PostgreSQL serve started and watches; undefined with a store URL. */
  readonly embedded?: (() => EmbeddedStatus) | undefined;
  /** A cluster's workers (workers > 1): how many serve, for /readyz; undefined for one process. */
  readonly workers?: (() => WorkersStatus) | undefined;
}

/**
 * What /metrics and the console's counters read: one process's ProxyMetrics, or a cluster's primary
 * gathering every worker's (cluster/cluster-metrics.ts).
 */
export interface AdminMetrics {
  readonly registry: { metrics(): Promise<string>; readonly contentType: string };
  readonly recentOutcomes: { snapshot(): OutcomeCounters | Promise<OutcomeCounters> };
}

export interface WorkersStatus {
  readonly configured: number;
  /** Workers listening now (a replaced one counts once its successor listens). */
  readonly serving: number;
}

/** How a clear on a cluster's primary reached the workers' replay caches (cluster-forget.ts). */
export interface WorkersForgot {
  /** The workers serving when the clear committed: each was asked to forget the record. */
  readonly asked: number;
  /** Of those, the ones that confirmed, or exited meanwhile (a process gone holds nothing). */
  readonly forgot: number;
  /** The ones that did not confirm in time: they forget it when the clear's NOTIFY reaches them. */
  readonly unconfirmed: readonly UnconfirmedWorker[];
}

export interface UnconfirmedWorker {
  readonly workerPid: number | undefined;
  readonly reason: string;
}
