// `idempotency-proxy serve`: migrate, listen (proxy and admin), prune in the background, reload on
// SIGHUP, and drain on SIGTERM/SIGINT.
import type { AddressInfo } from 'node:net';
import type http from 'node:http';
import type { Logger } from 'pino';
import { createAdminServer } from '../admin/admin-server';
import { type App, createApp } from '../app';
import { configWarnings } from '../config/warnings';
import { loadConfigFile } from '../config/load';
import type { ProxyConfig } from '../config/types';
import { CompletionListener, type EvictionSubscriber } from '../db/completion-listener';
import { completionChannel, evictionChannel, PostgresKeyStore } from '../db/key-store';
import { ReplayCache, startCounterFlush } from '../idempotency/replay-cache';
import { migrate } from '../db/migrate';
import { detectTopology } from '../db/topology';
import { startPruner } from '../db/pruner';
import { ConfigError } from '../errors';
import { ProxyMetrics } from '../observability/metrics';
import { settingName } from '../config/env-sources';
import { StartupError } from '../startup-error';
import { type OpenDatabase, openDatabase } from './database';

/** How often replay-cache hits are added to their records' attempts/replays counters. */
export const COUNTER_FLUSH_MS = 1_000;

export async function serve(config: ProxyConfig, logger: Logger): Promise<number> {
  for (const warning of configWarnings(config))
    logger.warn({ route: warning.route }, warning.message);
  // A signal before we serve (Ctrl-C while the database starts) stops at once: nothing is in flight.
  // The embedded server, if spawned, is stopped by its exit hook (see db/embedded.ts).
  const interrupted = (signal: NodeJS.Signals): void => {
    logger.warn({ signal }, 'interrupted during startup; stopping');
    process.exit(1);
  };
  process.once('SIGTERM', interrupted);
  process.once('SIGINT', interrupted);

  const database = await openDatabase(config, logger, 'serve');
  // What startup started, stopped in reverse when a later step fails (a port in use): the embedded
  // server must not outlive a proxy that never served.
  const started: (() => Promise<void>)[] = [() => database.close()];
  let running: Running;
  try {
    running = await startServing(config, logger, database, started);
  } catch (error) {
    for (const stop of started.reverse()) await stop().catch(() => undefined);
    throw error;
  }
  process.off('SIGTERM', interrupted);
  process.off('SIGINT', interrupted);
  const { app } = running;
  const onReload = (): void => reload(app, config.file, logger);
  process.on('SIGHUP', onReload);
  // npm start runs us under npm (and a shell): this is the PID that takes the signals.
  logger.info(
    { pid: process.pid },
    `PID ${process.pid}: SIGHUP reloads ${config.file}; SIGTERM or SIGINT (Ctrl-C) drains and stops`,
  );

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
  await running.close(app.config().shutdownGraceMs);
  await database.close();
  logger.info('stopped');
  return 0;
}

interface Running {
  readonly app: App;
  /** Drains in-flight requests (up to `graceMs`), then stops everything but the database. */
  close(graceMs: number): Promise<void>;
}

/**
 * Migrates, then starts the listener, proxy, admin server and pruner, pushing how to stop each onto
 * `started` as it goes.
 */
async function startServing(
  config: ProxyConfig,
  logger: Logger,
  database: OpenDatabase,
  started: (() => Promise<void>)[],
): Promise<Running> {
  const migration = await database.whenReady(() => migrate(database.pool, config.store.table));
  logger.info({ table: config.store.table, ...migration }, 'store schema is up to date');
  const topology = await detectTopology(database.pool, config.store.table);
  if (topology.kind === 'citus') {
    logger.info(
      { ...topology },
      `store: a Citus ${topology.distributed ? `distributed table, ${topology.shards} shards on ${topology.nodes} node(s)` : 'database, table not distributed'}`,
    );
  }

  const metrics = new ProxyMetrics();
  const store = new PostgresKeyStore(database.pool, config.store.table, {
    distributed: topology.kind === 'citus' && topology.distributed,
    onNamedStatementsLost: (error) =>
      logger.warn(
        { code: (error as { code?: unknown }).code },
        'store: a named statement did not survive between transactions (PgBouncer in transaction mode?); statements are sent unnamed from now on',
      ),
  });
  const cached = replayCacheFor(config, store, logger);
  if (cached) started.push(() => cached.flush.stop());
  const listener = new CompletionListener(
    database.url,
    completionChannel(config.store.table),
    logger,
    cached?.subscriber,
  );
  started.push(() => listener.close());
  await listener.start();
  const app = createApp({ config, store, logger, waiter: listener, metrics, cache: cached?.cache });
  started.push(() => app.close(0));
  const admin = createAdminServer({
    config: () => app.config(),
    pool: database.pool,
    metrics,
    draining: () => app.draining(),
    beforeScrape: () => metrics.waiting(listener.stats.waiting),
  });
  started.push(() => closeServer(admin));
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
  started.push(() => pruner.stop());

  await listen(app.server, config, 'listen', logger, 'idempotency-proxy');
  await listen(admin, config, 'admin', logger, 'admin');
  if (config.admin.token === undefined) {
    logger.info(
      `admin /keys is off: set ${settingName(config, 'admin.token')} to inspect and clear keys over HTTP`,
    );
  }
  return {
    app,
    async close(graceMs) {
      await app.close(graceMs);
      await closeServer(admin);
      await pruner.stop();
      await cached?.flush.stop();
      await listener.close();
    },
  };
}

function closeServer(server: http.Server): Promise<void> {
  return new Promise<void>((resolve) => server.close(() => resolve()));
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
    for (const warning of configWarnings(next))
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
  config: ProxyConfig,
  section: 'listen' | 'admin',
  logger: Logger,
  what: string,
): Promise<void> {
  const { host, port } = config[section];
  await new Promise<void>((resolve, reject) => {
    server.once('error', (error) => reject(listenError(error, config, section, what)));
    server.listen(port, host, () => resolve());
  });
  const address = server.address() as AddressInfo;
  logger.info(
    { host: address.address, port: address.port },
    `${what} listening on http://${address.address}:${address.port}`,
  );
}

/** One line naming the port and the setting (and variable) that chose it. */
function listenError(
  error: NodeJS.ErrnoException,
  config: ProxyConfig,
  section: 'listen' | 'admin',
  what: string,
): Error {
  const { host, port } = config[section];
  const portSetting = settingName(config, `${section}.port`);
  switch (error.code) {
    case 'EADDRINUSE':
      return new StartupError(
        `port ${port} on ${host} is already in use, so the ${what} server cannot listen: stop the process that holds it, or set ${portSetting} to a free port`,
        { cause: error },
      );
    case 'EACCES':
      return new StartupError(
        `not allowed to listen on port ${port} on ${host} (ports below 1024 need root or CAP_NET_BIND_SERVICE): set ${portSetting} to a port above 1023`,
        { cause: error },
      );
    case 'EADDRNOTAVAIL':
      return new StartupError(
        `${host} is not an address of this machine, so the ${what} server cannot listen on it: set ${settingName(config, `${section}.host`)} to one (0.0.0.0 for all, 127.0.0.1 for this machine only)`,
        { cause: error },
      );
    default:
      return error;
  }
}
