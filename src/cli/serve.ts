// `idempotency-proxy serve`: migrate, listen (proxy and admin), prune in the background, reload on
// SIGHUP, and drain on SIGTERM/SIGINT.
import type { AddressInfo } from 'node:net';
import type http from 'node:http';
import type { Logger } from 'pino';
import { createAdminServer } from '../admin/admin-server';
import { type App, createApp } from '../app';
import { leaseWarnings } from '../config/lease-warnings';
import { loadConfigFile } from '../config/load';
import type { ProxyConfig } from '../config/types';
import { CompletionListener, type EvictionSubscriber } from '../db/completion-listener';
import { completionChannel, evictionChannel, PostgresKeyStore } from '../db/key-store';
import { ReplayCache, startCounterFlush } from '../idempotency/replay-cache';
import { migrate } from '../db/migrate';
import { startPruner } from '../db/pruner';
import { ConfigError } from '../errors';
import { ProxyMetrics } from '../observability/metrics';
import { openDatabase, whenDatabaseReady } from './database';

/** How often replay-cache hits are added to their records' attempts/replays counters. */
export const COUNTER_FLUSH_MS = 1_000;

export async function serve(config: ProxyConfig, logger: Logger): Promise<number> {
  for (const warning of leaseWarnings(config))
    logger.warn({ route: warning.route }, warning.message);
  const database = await openDatabase(config, logger);
  try {
    const migration = await whenDatabaseReady(
      () => migrate(database.pool, config.store.table),
      logger,
    );
    logger.info({ table: config.store.table, ...migration }, 'store schema is up to date');
  } catch (error) {
    await database.close();
    throw error;
  }

  const metrics = new ProxyMetrics();
  const store = new PostgresKeyStore(database.pool, config.store.table);
  const cached = replayCacheFor(config, store, logger);
  const listener = new CompletionListener(
    database.url,
    completionChannel(config.store.table),
    logger,
    cached?.subscriber,
  );
  await listener.start();
  const app = createApp({ config, store, logger, waiter: listener, metrics, cache: cached?.cache });
  const admin = createAdminServer({
    config: () => app.config(),
    pool: database.pool,
    metrics,
    draining: () => app.draining(),
    beforeScrape: () => metrics.waiting(listener.stats.waiting),
  });
  const pruner = startPruner(database.pool, config.store.table, config.store.pruneIntervalMs, {
    pruned: (result) => {
      if (result.deleted > 0) metrics.prunedRows(result.deleted);
      if (result.deleted > 0) logger.info({ ...result }, 'pruned expired records');
    },
    failed: (error) => {
      metrics.storeError('prune');
      logger.warn({ err: error }, 'pruning expired records failed; will retry next round');
    },
  });

  await listen(app.server, config.listen.port, config.listen.host, logger, 'idempotency-proxy');
  await listen(admin, config.admin.port, config.admin.host, logger, 'admin');
  const onReload = (): void => reload(app, config.file, logger);
  process.on('SIGHUP', onReload);

  const signal = await new Promise<NodeJS.Signals>((resolve) => {
    process.once('SIGTERM', () => resolve('SIGTERM'));
    process.once('SIGINT', () => resolve('SIGINT'));
  });
  logger.info(
    { signal, inFlight: app.inFlight(), graceMs: app.config().shutdownGraceMs },
    'shutting down: draining in-flight requests',
  );
  const forceExit = (): void => {
    logger.warn('second signal: exiting without waiting');
    process.exit(1);
  };
  process.once('SIGTERM', forceExit);
  process.once('SIGINT', forceExit);
  process.off('SIGHUP', onReload);
  await app.close(app.config().shutdownGraceMs);
  await new Promise<void>((resolve) => admin.close(() => resolve()));
  await pruner.stop();
  await cached?.flush.stop();
  await listener.close();
  await database.close();
  logger.info('stopped');
  return 0;
}

/** The replay cache, its clear subscription and its counter flush; undefined when store.replayCache is 0. */
export function replayCacheFor(config: ProxyConfig, store: PostgresKeyStore, logger: Logger) {
  if (config.store.replayCacheBytes <= 0) return undefined;
  const cache = new ReplayCache(config.store.replayCacheBytes);
  const subscriber: EvictionSubscriber = {
    channel: evictionChannel(config.store.table),
    evict: (digest) => cache.evict(digest),
    live: (connected) => cache.setLive(connected),
  };
  const flush = startCounterFlush(
    cache,
    (deltas) => store.flushCounters(deltas),
    COUNTER_FLUSH_MS,
    (error) =>
      logger.warn(
        { err: error },
        'could not add replay-cache hits to the records; those counts are lost',
      ),
  );
  return { cache, subscriber, flush };
}

/** SIGHUP: re-read the config; a valid one is swapped in for new requests, an invalid one changes nothing. */
function reload(app: App, file: string, logger: Logger): void {
  try {
    const next = loadConfigFile(file);
    app.reload(next);
    for (const warning of leaseWarnings(next))
      logger.warn({ route: warning.route }, warning.message);
    logger.info({ config: file, routes: next.routes.length }, 'configuration reloaded');
  } catch (error) {
    const issues =
      error instanceof ConfigError ? error.message.split('\n') : [(error as Error).message];
    logger.error(
      { config: file, issues },
      'configuration reload rejected; keeping the running configuration',
    );
  }
}

async function listen(
  server: http.Server,
  port: number,
  host: string,
  logger: Logger,
  what: string,
): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  const address = server.address() as AddressInfo;
  logger.info(
    { host: address.address, port: address.port },
    `${what} listening on http://${address.address}:${address.port}`,
  );
}
