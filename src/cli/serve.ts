// `idempotency-proxy serve`: migrate, listen (proxy and admin), prune in the background, reload on
// SIGHUP, and drain on SIGTERM/SIGINT.
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import type { App } from '../app';
import type { ProxyInstance } from '../compose';
import { openProxy } from '../embedding';
import { configWarnings } from '../compiler/warnings';
import { loadConfigFile } from '../compiler/load';
import type { ProxyConfig } from '../config/types';
import { ConfigError } from '../errors';
import { settingName } from '../config/env-sources';
import { StartupError } from '../startup-error';
import { type Listener, schemeOf } from '../listener';
import { collectStartupGarbage } from '../heap-tuning';
import { type RunningHeapBound, startHeapBound } from '../heap-bound';
import { shortLivedClasses } from '../short-lived-classes';
import { stopSignal } from '../stop-signal';

/**
 * A signal before we serve (Ctrl-C while the database starts) stops at once: nothing is in flight.
 * The embedded server, if spawned, is stopped by its exit hook (see embedded/embedded.ts); a
 * cluster's workers, whose channel to the primary closes, by node:cluster. Returns the call that
 * hands the signals back once the process serves.
 */
export function stopOnSignalWhileStarting(logger: Logger): () => void {
  const interrupted = (signal: NodeJS.Signals): void => {
    logger.warn({ signal }, 'interrupted during startup; stopping');
    process.exit(1);
  };
  process.once('SIGTERM', interrupted);
  process.once('SIGINT', interrupted);
  return () => {
    process.off('SIGTERM', interrupted);
    process.off('SIGINT', interrupted);
  };
}

export async function serve(config: ProxyConfig, logger: Logger): Promise<number> {
  for (const warning of configWarnings(config))
    logger.warn({ route: warning.route }, warning.message);
  const releaseStartupSignals = stopOnSignalWhileStarting(logger);

  const { database, instance: proxy } = await openProxy(config, logger);
  let running: Running;
  try {
    running = await startServing(config, logger, proxy);
  } catch (error) {
    // The embedded server must not outlive a proxy that never served (a port in use).
    await proxy.close(0).catch(() => undefined);
    await database.close().catch(() => undefined);
    throw error;
  }
  releaseStartupSignals();
  const { app } = running;
  const onReload = (): void => reload(running, config.file, logger);
  process.on('SIGHUP', onReload);
  // npm start runs us under npm (and a shell): this is the PID that takes the signals.
  logger.info(
    { pid: process.pid },
    `PID ${process.pid}: SIGHUP reloads ${config.file}; SIGTERM or SIGINT (Ctrl-C) drains and stops`,
  );

  let signal: NodeJS.Signals;
  try {
    signal = await Promise.race([stopSignal(), database.lost]);
  } catch (error) {
    // The embedded server is gone for good: nothing can be claimed or stored, so stop serving.
    process.off('SIGHUP', onReload);
    await running.close(0);
    await database.close();
    throw error;
  }
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
  /** app.reload, and the admin listener's TLS material with it. */
  reload(next: ProxyConfig): void;
  /** Drains in-flight requests (up to `graceMs`), then stops everything but the database. */
  close(graceMs: number): Promise<void>;
}

/** Starts the proxy and admin listeners of a composed instance. */
async function startServing(
  config: ProxyConfig,
  logger: Logger,
  proxy: ProxyInstance,
): Promise<Running> {
  const { app, admin } = proxy;
  await listenAll(
    [
      { server: app.server, section: 'listen', what: 'idempotency-proxy' },
      { server: admin, section: 'admin', what: 'admin' },
    ],
    config,
    logger,
  );
  if (config.admin.token === undefined) {
    logger.info(
      `admin /keys is off: set ${settingName(config, 'admin.token')} to inspect and clear keys over HTTP`,
    );
  }
  const heap = boundHeap(config, proxy, logger);
  return {
    app,
    reload: (next) => proxy.reload(next),
    close: (graceMs) => {
      heap?.stop();
      return proxy.close(graceMs);
    },
  };
}

/**
 * Starts the heap's bound (heapTarget) in a process that serves the listener: this one, or each
 * cluster worker. Each collection is counted in the metrics and logged at debug level.
 */
export function boundHeap(
  config: ProxyConfig,
  proxy: Pick<ProxyInstance, 'metrics'>,
  logger: Logger,
): RunningHeapBound | undefined {
  return startHeapBound(
    config.heapTargetBytes,
    (collection) => {
      proxy.metrics.heapCollected(collection.pauseMs);
      logger.debug({ ...collection }, 'heap past heapTarget: collected');
    },
    shortLivedClasses,
  );
}

/** SIGHUP: re-read the config; a valid one is swapped in for new requests, an invalid one changes nothing. */
function reload(running: Running, file: string, logger: Logger): void {
  try {
    const next = loadConfigFile(file);
    running.reload(next);
    for (const warning of configWarnings(next))
      logger.warn({ route: warning.route }, warning.message);
    logger.info({ config: file, routes: next.routes.length }, 'configuration reloaded');
  } catch (error) {
    logReloadRejected(error, file, logger);
  }
}

/** A config that did not load, or changes what needs a restart: nothing changes, and the log says why. */
export function logReloadRejected(error: unknown, file: string, logger: Logger): void {
  const issues =
    error instanceof ConfigError ? error.message.split('\n') : [(error as Error).message];
  logger.error(
    { config: file, issues },
    'configuration reload rejected; keeping the running configuration',
  );
}

export interface ListenerSpec {
  readonly server: Listener;
  readonly section: 'listen' | 'admin';
  readonly what: string;
}

/**
 * Every listener is tried before any failure is reported, so a person who frees one busy port is
 * not sent back for the next: all the ports in use are named in one message. Before them, the
 * garbage of starting is collected: everything the process serves with is loaded by now.
 */
export async function listenAll(
  specs: readonly ListenerSpec[],
  config: ProxyConfig,
  logger: Logger,
): Promise<void> {
  const collected = collectStartupGarbage();
  if (collected !== undefined) {
    logger.debug(
      { heapBytesBefore: collected.heapBytesBefore, heapBytesAfter: collected.heapBytesAfter },
      'collected the garbage of starting',
    );
  }
  const results = await Promise.allSettled(
    specs.map((spec) => listen(spec.server, config, spec.section, logger, spec.what)),
  );
  const failures = results.flatMap((result, i) =>
    result.status === 'rejected'
      ? [{ spec: specs[i]!, error: result.reason as NodeJS.ErrnoException }]
      : [],
  );
  if (failures.length === 0) return;
  const inUse = failures.filter(({ error }) => error.code === 'EADDRINUSE');
  if (failures.length === 1 || inUse.length < failures.length)
    throw listenError(
      failures[0]!.error,
      config,
      failures[0]!.spec.section,
      failures[0]!.spec.what,
    );
  const ports = inUse.map(({ spec }) => {
    const { host, port } = config[spec.section];
    return `${port} on ${host} (the ${spec.what} server; set by ${settingName(config, `${spec.section}.port`)})`;
  });
  throw new StartupError(
    `ports already in use: ${ports.join(' and ')}: stop the process that holds them (another idempotency-proxy in this directory?), or set those settings to free ports`,
    { cause: inUse[0]!.error },
  );
}

async function listen(
  server: Listener,
  config: ProxyConfig,
  section: 'listen' | 'admin',
  logger: Logger,
  what: string,
): Promise<void> {
  const { host, port } = config[section];
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  const address = server.address() as AddressInfo;
  logger.info(
    { host: address.address, port: address.port },
    `${what} listening on ${schemeOf(server)}://${address.address}:${address.port}`,
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
