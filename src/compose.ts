// The composition root: one proxy instance's parts wired together — the store (and how the table is
// laid out), the replay cache and its counter flush, the completion listener, the app, the admin
// listener, the pruner, and — when the OpenTelemetry variables ask for it — tracing. `serve` and the test support both build an instance here, so the tests
// run the wiring production runs. It does not listen and does not own the pool.
import type { Pool } from 'pg';
import type { Logger } from 'pino';
import { performance } from 'node:perf_hooks';
import type { ReplayCacheStatus } from './admin/admin-deps';
import { createAdminServer } from './admin/admin-server';
import { type App, createApp, hashKey } from './app';
import { probeOf, protocolAdapters } from './protocols';
import type { ProxyConfig } from './config/types';
import { CompletionListener, type EvictionSubscriber } from './store/postgres/completion-listener';
import { PostgresKeyStore } from './store/postgres/key-store';
import type { PendingWrite, WriteObserver } from './store/postgres/pending-writes';
import type { DropReason } from './store/postgres/write-outbox';
import { openSpool } from './store/spool-at-start';
import { completionChannel, evictionChannel } from './store/postgres/statements';
import { type BackgroundPruner, startPruner } from './store/postgres/pruner';
import { ReconcileStore } from './store/postgres/reconcile-store';
import { PostgresHandleStore } from './store/postgres/handle-store';
import { Reconciler } from './reconcile/reconciler';
import { startSweeper } from './reconcile/sweeper';
import { storeConnection } from './db/pool';
import { databaseErrorFields, serverAddress } from './db/store-failure';
import { detectTopology, type Topology } from './db/topology';
import { CoalescingStore } from './store/coalescing-store';
import { ReplayCache } from './store/replay-cache';
import { ProxyMetrics } from './metrics';
import { startTracing } from './observability/tracing-switch';
import type { Tracing } from './observability/tracing';
import { type Listener, reloadListenerTls } from './listener';
import type { EmbeddedStatus } from './embedded/embedded-supervisor';

/** How often requests answered from memory are added to their records' counters. */
const COUNTER_FLUSH_MS = 1_000;

export interface ComposeOptions {
  readonly config: ProxyConfig;
  /** The store's pool (already migrated); the caller owns and ends it. */
  readonly pool: Pool;
  /** The URL the completion listener connects to (its own connection, outside the pool). */
  readonly databaseUrl: string;
  readonly logger: Logger;
  readonly metrics?: ProxyMetrics;
  /** Run the pruner (serve does; tests of other things leave expired rows alone). */
  readonly prune?: boolean;
  /**
   * Where the OpenTelemetry variables (OTEL_EXPORTER_OTLP_ENDPOINT, …) are read; process.env by
   * default. Tracing is off unless they name an endpoint.
   */
  readonly env?: NodeJS.ProcessEnv;
  /** The embedded PostgreSQL serve watches, for /readyz. */
  readonly embedded?: (() => EmbeddedStatus) | undefined;
  /** The spool's directory when not store.outbox.spool's own: a cluster worker's (worker-N in it). */
  readonly spoolDir?: string;
}

export interface ProxyInstance {
  readonly app: App;
  readonly admin: Listener;
  readonly store: PostgresKeyStore;
  readonly listener: CompletionListener;
  readonly metrics: ProxyMetrics;
  readonly cache: ReplayCache | undefined;
  readonly topology: Topology;
  /** Spans per request, when tracing is on. */
  readonly tracing: Tracing | undefined;
  /** app.reload, and the admin listener's new certificate (admin.tls) with it. */
  reload(next: ProxyConfig): void;
  /** Adds requests answered from memory to the records' counters now (otherwise every COUNTER_FLUSH_MS). */
  flushCounters(): Promise<void>;
  /** Stops accepting, drains up to graceMs, then closes everything but the pool. */
  close(graceMs?: number): Promise<void>;
}

export async function composeProxy(options: ComposeOptions): Promise<ProxyInstance> {
  const { config, pool, logger } = options;
  const table = config.store.table;
  const topology = await detectTopology(pool, table);
  if (topology.kind === 'citus') {
    logger.info(
      { ...topology },
      `store: a Citus ${topology.distributed ? `distributed table, ${topology.shards} shards on ${topology.nodes} node(s)` : 'database, table not distributed'}`,
    );
  }
  const metrics = options.metrics ?? new ProxyMetrics();
  const spoolDir = options.spoolDir ?? config.store.outbox.spool;
  const spooled = spoolDir === undefined ? undefined : await openSpool(spoolDir, config, logger);
  const store = new PostgresKeyStore(pool, table, {
    distributed: topology.kind === 'citus' && topology.distributed,
    onNamedStatementsLost: (error) =>
      logger.warn(
        { code: (error as { code?: unknown }).code },
        'store: a named statement did not survive between transactions (PgBouncer in transaction mode?); statements are sent unnamed from now on',
      ),
    outbox: config.store.outbox,
    writes: pendingWriteReports(metrics, logger),
    spool: spooled?.spool,
  });
  if (spooled && spooled.recovered.length > 0) {
    const count = store.recoverSpooled(spooled.recovered);
    logger.warn(
      { spool: spoolDir, writes: count },
      'store: the spool holds answers (and releases) an earlier run could not store; they are stored before their keys are answered',
    );
  }
  metrics.watchPendingWrites(() => store.pendingWrites);
  const cache =
    config.store.replayCacheBytes > 0 ? new ReplayCache(config.store.replayCacheBytes) : undefined;
  cache?.keepPolicies(fingerprintEpochs(config));
  const server = serverAddress(options.databaseUrl);
  const listener = new CompletionListener(
    storeConnection(
      options.databaseUrl,
      config.store.url === undefined ? undefined : config.store.tls,
    ),
    completionChannel(table),
    logger,
    cache && evictionsOf(cache, table),
    {
      intervalMs: config.store.listenProbeIntervalMs,
      timeoutMs: config.store.listenProbeTimeoutMs,
    },
  );
  listener.whenLost(() => store.noteOutage());
  const caching = new CoalescingStore(store, cache, {
    waiter: listener,
    onFlushError: (error) =>
      logger.warn(
        databaseErrorFields(error, server),
        'could not add the requests answered from memory to their records; those counts are lost',
      ),
  });
  caching.startFlushing(COUNTER_FLUSH_MS);
  try {
    await listener.start();
  } catch (error) {
    await caching.stopFlushing();
    throw error;
  }
  const tracing = await startTracing(options.env ?? process.env, logger);
  // The protocols are registered here, once: the app reads requests with them, and the reconciler
  // asks a route's upstream with its protocol's probe.
  const protocols = protocolAdapters();
  const reconcileStore = new ReconcileStore(pool, table);
  const reconciler = new Reconciler(reconcileStore, logger, metrics, probeOf(protocols));
  const app = createApp({
    config,
    store: caching,
    logger,
    metrics,
    tracing,
    reconciler,
    protocols,
    handles: new PostgresHandleStore(pool, table),
  });
  const sweeper = startSweeper(reconciler, () => app.config(), logger);
  const admin = createAdminServer({
    config: () => app.config(),
    pool,
    metrics,
    draining: () => app.draining(),
    beforeScrape: () => metrics.waiting(listener.stats.waiting),
    logger,
    embedded: options.embedded,
    forgetRecords:
      cache &&
      ((ids) => {
        for (const id of ids) cache.forget(id);
        return Promise.resolve(undefined);
      }),
    replayCache: () => replayCacheStatus(cache, listener),
  });
  const pruner = options.prune
    ? startLoggedPruner(pool, config, options.databaseUrl, metrics, logger)
    : undefined;
  return {
    app,
    admin,
    store,
    listener,
    metrics,
    cache,
    topology,
    tracing,
    flushCounters: () => caching.flushAnswered(),
    reload(next) {
      app.reload(next);
      // What memory learnt under a fingerprint policy the new config no longer has is dropped.
      cache?.keepPolicies(fingerprintEpochs(next));
      reloadListenerTls(admin, next.admin.tls);
    },
    async close(graceMs) {
      await sweeper.stop();
      await app.close(graceMs);
      // The drained requests' completions that are still pending, before the pool goes.
      const { kept, lost } = await store.drainWrites(config.store.outbox.drainTimeoutMs);
      if (kept.length > 0)
        logger.warn(
          {
            spool: spoolDir,
            writes: kept.length,
            drainTimeoutMs: config.store.outbox.drainTimeoutMs,
          },
          'shutdown: answers not stored within store.outbox.drainTimeout stay in the spool; the next start on it stores them first',
        );
      // One line per write: each is an answer (or a release) an operator may have to account for.
      for (const write of lost)
        logger.error(
          { ...writeFields(write), drainTimeoutMs: config.store.outbox.drainTimeoutMs },
          `shutdown: a pending ${write.kind === 'complete' ? 'completion could not be stored within store.outbox.drainTimeout: the answer its client got is lost, and the claim ends as an unknown outcome when its lease ends' : 'release could not be stored within store.outbox.drainTimeout: its claim stays in progress until its lease ends'}`,
        );
      admin.closeAllConnections();
      await new Promise<void>((resolve) => admin.close(() => resolve()));
      await pruner?.stop();
      await caching.stopFlushing();
      await listener.close();
      // Last: the spans of the requests drained above are exported before we return.
      await tracing?.shutdown();
    },
  };
}

/** The fingerprint policies of a config's protected routes (config/types.ts fingerprintEpoch). */
function fingerprintEpochs(config: ProxyConfig): Set<string> {
  return new Set(config.routes.flatMap((route) => route.idempotency?.fingerprintEpoch ?? []));
}

/** The cache's own switch, and why the listener keeps it off when it does. */
function replayCacheStatus(
  cache: ReplayCache | undefined,
  listener: CompletionListener,
): ReplayCacheStatus {
  if (!cache) return { state: 'disabled' };
  const { provenAt, unproven } = listener.stats;
  if (cache.live && provenAt !== undefined)
    return { state: 'on', provenMsAgo: Math.round(performance.now() - provenAt) };
  return { state: 'off', reason: unproven ?? 'the LISTEN connection is not proven yet' };
}

/**
 * Counts the store's pending writes, and logs every one given up (an error line each: an answer a
 * client may have, lost with it) and every one that landed after a retry.
 */
function pendingWriteReports(metrics: ProxyMetrics, logger: Logger): WriteObserver {
  return {
    retried: (write) => metrics.writeRetried(write.kind),
    spoolRefused(write, error) {
      metrics.spoolRefused();
      logger.error(
        { ...writeFields(write), error: (error as Error).message },
        'store: the spool could not take an answer (store.outbox.spoolMaxBytes, or its disk): the client waits until PostgreSQL has it, and new claims get 503 meanwhile',
      );
    },
    replacedUnknown(id, status) {
      metrics.unknownOutcomeReplaced();
      logger.warn(
        { scope: id.scope, key: hashKey(id.key), status },
        "store: the claim's own answer replaced the unknown outcome settled when its lease ended; replays now send that answer",
      );
    },
    settled(write, settlement) {
      metrics.writeSettled(write.kind, settlement);
      const fields = {
        ...writeFields(write),
        attempts: 'attempts' in settlement ? settlement.attempts : undefined,
      };
      if (settlement.kind === 'landed') {
        logger.info(
          fields,
          write.kind === 'release_claim'
            ? 'store: released a claim whose reply was lost (nothing was forwarded under it)'
            : `store: a failed ${write.kind === 'complete' ? 'completion' : 'release'} landed on a retry`,
        );
      } else if (settlement.kind === 'stale') {
        if (write.kind === 'complete')
          logger.warn(
            fields,
            'store: a pending completion was not stored: its claim had been taken over',
          );
      } else if (settlement.reason !== 'shutdown') {
        // What shutdown could not land is one line of its own (close).
        logger.error(
          {
            ...fields,
            reason: settlement.reason,
            ...(settlement.error === undefined ? {} : databaseErrorFields(settlement.error)),
          },
          `store: gave up a pending ${write.kind === 'complete' ? 'completion: the answer its client got is not stored' : 'release: its claim stays in progress until its lease ends'} (${DROP_REASONS[settlement.reason]})`,
        );
      }
    },
  };
}

const DROP_REASONS: Record<DropReason, string> = {
  bound: 'store.outbox is full; the oldest write goes',
  expired: 'its record has expired',
  failed: 'PostgreSQL refused it for good',
  shutdown: 'the proxy stopped',
};

/** A pending write in a log line: its operation, scope and key (hashed: a log is no place for keys). */
function writeFields(write: PendingWrite): Record<string, unknown> {
  return { operation: write.kind, scope: write.id.scope, key: hashKey(write.id.key) };
}

/** The pruner of one serving process (a cluster's primary, or the one instance), counted and logged. */
export function startLoggedPruner(
  pool: Pool,
  config: ProxyConfig,
  databaseUrl: string,
  metrics: ProxyMetrics,
  logger: Logger,
): BackgroundPruner {
  const server = serverAddress(databaseUrl);
  return startPruner(pool, config.store.table, config.store.pruneIntervalMs, {
    pruned: (result) => {
      if (result.deleted > 0) metrics.prunedRows(result.deleted);
      if (result.deleted > 0) logger.info({ ...result }, 'pruned expired records');
    },
    failed: (error) => {
      metrics.storeError('prune');
      logger.warn(
        databaseErrorFields(error, server),
        'pruning expired records failed; will retry next round',
      );
    },
  });
}

/** Operator clears reach the cache through NOTIFY; while they cannot, the cache is off. */
function evictionsOf(cache: ReplayCache, table: string): EvictionSubscriber {
  return {
    channel: evictionChannel(table),
    evict: (digest) => cache.evict(digest),
    live: (connected) => cache.setLive(connected),
  };
}
