// `serve` with `workers` > 1: the cluster's primary. It does what needs doing once — opens the store
// (starting the one embedded PostgreSQL), migrates it, prunes, serves the admin listener — and runs
// the workers that serve clients (cluster/worker.ts): it hands each the database URL and the config
// text it checked, replaces one that dies, passes a SIGHUP on once the file loads, and on SIGTERM
// drains them all before it stops. What runs where: docs/operations.md#workers-every-core.
import path from 'node:path';
import type { Logger } from 'pino';
import { createAdminServer } from '../admin/admin-server';
import { listenAll, logReloadRejected, stopOnSignalWhileStarting } from '../cli/serve';
import { startLoggedPruner } from '../compose';
import { loadConfigSource } from '../compiler/load';
import type { ProxyConfig } from '../config/types';
import { configWarnings } from '../compiler/warnings';
import { settingName } from '../config/env-sources';
import { openStore } from '../embedding';
import { reloadListenerTls } from '../listener';
import { ProxyMetrics } from '../metrics';
import { restartOnlyChanges } from '../runtime';
import { clusterForget } from './cluster-forget';
import { clusterMetrics } from './cluster-metrics';
import type { Question } from './messages';
import { WorkerSupervisor } from './supervisor';
import { stopSignal } from '../stop-signal';

/** How long a reload waits for every worker to say it swapped the config in. */
const RELOAD_TIMEOUT_MS = 10_000;

export async function servePrimary(started: ProxyConfig, logger: Logger): Promise<number> {
  for (const warning of configWarnings(started))
    logger.warn({ route: warning.route }, warning.message);
  const releaseStartupSignals = stopOnSignalWhileStarting(logger);

  // The text the workers compile: read again here, as it is now, and checked before it is handed on.
  let current = loadConfigSource(started.file);
  const { file } = current.config;
  const metrics = new ProxyMetrics();
  const database = await openStore(current.config, logger, metrics);
  const supervisor = new WorkerSupervisor({
    count: current.config.workers,
    logger,
    // Each worker its own spool, the same for the worker that replaces it: one process per spool.
    start: (slot) => ({
      databaseUrl: database.url,
      configFile: file,
      configText: current.text,
      spoolDir: workerSpool(current.config.store.outbox.spool, slot),
    }),
  });
  const ask = supervisor.questions.ask.bind(supervisor.questions);
  const askServing = (question: Question, timeoutMs: number) =>
    ask(supervisor.serving(), question, timeoutMs);
  let draining = false;
  const admin = createAdminServer({
    config: () => current.config,
    pool: database.pool,
    metrics: clusterMetrics(metrics, askServing),
    // A clear answers once every worker's replay cache dropped the record.
    forgetRecords: clusterForget(askServing),
    draining: () => draining,
    logger,
    embedded: database.embeddedStatus,
    workers: () => supervisor.status(),
  });
  const pruner = startLoggedPruner(database.pool, current.config, database.url, metrics, logger);
  const stop = async (graceMs: number): Promise<boolean> => {
    draining = true;
    // A worker drains its requests (graceMs), then its pending writes (store.outbox.drainTimeout).
    const clean = await supervisor.drain(graceMs + current.config.store.outbox.drainTimeoutMs);
    admin.closeAllConnections();
    await new Promise<void>((resolve) => admin.close(() => resolve()));
    await pruner.stop();
    await database.close();
    return clean;
  };
  try {
    await supervisor.startAll();
    await listenAll([{ server: admin, section: 'admin', what: 'admin' }], current.config, logger);
  } catch (error) {
    await stop(0).catch(() => undefined);
    throw error;
  }
  releaseStartupSignals();
  if (current.config.admin.token === undefined) {
    logger.info(
      `admin /keys is off: set ${settingName(current.config, 'admin.token')} to inspect and clear keys over HTTP`,
    );
  }

  const onReload = (): void => {
    let next: typeof current;
    try {
      next = loadConfigSource(file);
      const blocked = restartOnlyChanges(current.config, next.config);
      if (blocked.length > 0)
        throw new Error(`these settings need a restart, not a reload: ${blocked.join(', ')}`);
    } catch (error) {
      logReloadRejected(error, file, logger);
      return;
    }
    current = next;
    reloadListenerTls(admin, next.config.admin.tls);
    for (const warning of configWarnings(next.config))
      logger.warn({ route: warning.route }, warning.message);
    void ask(
      supervisor.serving(),
      { what: 'reload', configText: next.text },
      RELOAD_TIMEOUT_MS,
    ).then((answers) => {
      const failed = answers.filter((answer) => answer.error !== undefined);
      const fields = { config: file, routes: next.config.routes.length, workers: answers.length };
      if (failed.length === 0) logger.info(fields, 'configuration reloaded');
      else
        logger.error(
          { ...fields, failed: failed.map(({ pid, error }) => ({ workerPid: pid, error })) },
          `configuration reloaded in ${answers.length - failed.length} of ${answers.length} workers; the others keep the previous one: send SIGHUP again`,
        );
    });
  };
  process.on('SIGHUP', onReload);
  logger.info(
    { pid: process.pid, workers: current.config.workers },
    `PID ${process.pid}: ${current.config.workers} workers serving; SIGHUP reloads ${file} in every worker; SIGTERM or SIGINT (Ctrl-C) drains them and stops`,
  );

  let signal: NodeJS.Signals;
  try {
    signal = await Promise.race([stopSignal(), database.lost, supervisor.failed]);
  } catch (error) {
    // The embedded server is gone for good, or the workers keep dying: stop serving.
    process.off('SIGHUP', onReload);
    await stop(0);
    throw error;
  }
  const graceMs = current.config.shutdownGraceMs;
  logger.info(
    { signal, workers: supervisor.serving().length, graceMs },
    'shutting down: draining every worker',
  );
  const forceExit = (): void => {
    logger.warn('second signal: exiting without waiting');
    supervisor.killAll();
    process.exit(1);
  };
  process.once('SIGTERM', forceExit);
  process.once('SIGINT', forceExit);
  process.off('SIGHUP', onReload);
  const clean = await stop(graceMs);
  if (!clean) {
    logger.error('stopped; a worker did not drain cleanly (see above)');
    return 1;
  }
  logger.info('stopped');
  return 0;
}

/** A worker's spool: worker-N (from 1) in the configured one. */
function workerSpool(spool: string | undefined, slot: number): string | undefined {
  return spool === undefined ? undefined : path.join(spool, `worker-${slot + 1}`);
}
