// Opens the store's database for a command: the configured server, or the embedded PostgreSQL when
// no URL is set (README.md#quick-start) — for an operator command, the one a running proxy already
// started on the same data directory if there is one. Also waits for a server that is still
// starting (docker-compose order), saying so in one line rather than a stack trace per attempt.
import type { Pool } from 'pg';
import type { Logger } from 'pino';
import { settingName } from '../config/env-sources';
import type { ProxyConfig, StoreTlsConfig } from '../config/types';
import { createPool } from './pool';
import { embeddedDataDir } from '../embedded/data-dir-placement';
import { databaseErrorFields, serverAddress } from './store-failure';
import { postmasterLogFile } from '../embedded/postgres-process';
import { RESTART_ATTEMPTS } from '../embedded/embedded-supervisor';
import type { EmbeddedStatus, SupervisorEvents } from '../embedded/embedded-supervisor';
import { StartupError } from '../startup-error';
import { databaseStartupError, isConnectionError, reasonOf, serverOf } from './database-errors';

export interface OpenDatabase {
  readonly pool: Pool;
  /** The connection string in use (the embedded server's when it was started). */
  readonly url: string;
  readonly embedded: boolean;
  /** Runs `task`, retrying while the database refuses connections for up to `waitMs` (startupWaitMs). */
  whenReady<T>(task: () => Promise<T>, waitMs?: number): Promise<T>;
  /** The embedded server `serve` started and watches: running, restarting, how often restarted. */
  readonly embeddedStatus: (() => EmbeddedStatus) | undefined;
  /**
   * Rejects when the embedded server serve watches died and could not be started again: the proxy
   * cannot serve and must exit. Never settles otherwise.
   */
  readonly lost: Promise<never>;
  close(): Promise<void>;
}

export interface OpenOptions {
  /** serve: the embedded server was started again after it exited on its own (for the metric). */
  readonly onEmbeddedRestart?: () => void;
}

export async function openDatabase(
  config: ProxyConfig,
  logger: Logger,
  command: string,
  options: OpenOptions = {},
): Promise<OpenDatabase> {
  let url = config.store.url;
  let embedded: EmbeddedHandle | undefined;
  if (url === undefined) {
    embedded = await openEmbedded(config, logger, command, options);
    url = embedded.url;
  }
  const tls = config.store.url === undefined ? undefined : config.store.tls;
  const connectionUrl = url;
  const pool = storePool(config, url, logger);
  return {
    pool,
    url,
    embedded: config.store.url === undefined,
    whenReady: (task, waitMs) => whenDatabaseReady(task, logger, connectionUrl, waitMs, tls),
    embeddedStatus: embedded?.status,
    lost: embedded?.lost ?? new Promise<never>(() => undefined),
    async close() {
      await pool.end();
      await embedded?.stop?.();
    },
  };
}

/**
 * The store's pool on `url` (the configured one, or the embedded server's): what every process that
 * serves opens, a cluster's workers included (they are handed the primary's URL).
 */
export function storePool(config: ProxyConfig, url: string, logger: Logger): Pool {
  return createPool({
    url,
    tls: config.store.url === undefined ? undefined : config.store.tls,
    size: config.store.poolSize,
    synchronousCommit: config.store.synchronousCommit,
    onError: (error) =>
      logger.warn(
        databaseErrorFields(error, serverAddress(url)),
        'idle database connection failed',
      ),
  });
}

interface EmbeddedHandle {
  readonly url: string;
  /** How to stop it, when this command started it. */
  readonly stop: (() => Promise<void>) | undefined;
  readonly status: (() => EmbeddedStatus) | undefined;
  readonly lost: Promise<never> | undefined;
}

/** The embedded server's URL, and how to stop it when this command started it. */
async function openEmbedded(
  config: ProxyConfig,
  logger: Logger,
  command: string,
  options: OpenOptions,
): Promise<EmbeddedHandle> {
  // Where the data really is (as root it may be placed outside the checkout): what every line says.
  const dataDir = embeddedDataDir(config.store.dataDir);
  const embeddedModule = await import('../embedded/embedded');
  const { awaitRunningEmbedded, EmbeddedInUseError, startEmbeddedPostgres } = embeddedModule;
  // migrate, prune and inspect next to a running `npm start`: use its server, leave it running.
  const useRunning = (running: NonNullable<Awaited<ReturnType<typeof awaitRunningEmbedded>>>) => {
    const { port } = running.postmaster;
    logger.info(
      { dataDir, port, ownerPid: running.owner?.pid },
      running.owner
        ? `using the embedded PostgreSQL of the running proxy (PID ${running.owner.pid}) on port ${port}`
        : `using the embedded PostgreSQL left running on port ${port} (its proxy is gone; the next serve stops it)`,
    );
    return { url: running.url, stop: undefined, status: undefined, lost: undefined };
  };
  if (command !== 'serve') {
    const running = await awaitRunningEmbedded(dataDir);
    if (running) return useRunning(running);
  }
  logger.info(
    { dataDir },
    `no store.url or DATABASE_URL set: starting the embedded PostgreSQL in ${dataDir}`,
  );
  let embedded: Awaited<ReturnType<typeof startEmbeddedPostgres>>;
  let giveUp: ((error: Error) => void) | undefined;
  const lost =
    command === 'serve' ? new Promise<never>((_, reject) => (giveUp = reject)) : undefined;
  lost?.catch(() => undefined); // serve awaits it; until then an early rejection is not unhandled
  try {
    embedded = await startEmbeddedPostgres({
      dataDir: config.store.dataDir, // placed again inside, after the server's user is made
      owner: `idempotency-proxy ${command}`,
      shortLived: command !== 'serve',
      dataDirSetting: settingName(config, 'store.dataDir'),
      onLog: (line) => logger.debug({ postgres: line }, 'embedded PostgreSQL'),
      onNotice: (message) => logger.info({ dataDir }, message),
      supervise:
        command === 'serve'
          ? supervisionLog(
              logger,
              () => embedded,
              options,
              (error) => giveUp!(error),
            )
          : undefined,
    });
  } catch (error) {
    // A proxy took the data dir while we looked (it was still initialising): use its server.
    const running =
      command !== 'serve' && error instanceof EmbeddedInUseError
        ? await awaitRunningEmbedded(dataDir)
        : undefined;
    if (running) return useRunning(running);
    throw error;
  }
  logger.info(
    { dataDir: embedded.dataDir, port: embedded.port, postmasterPid: embedded.pid },
    'embedded PostgreSQL started',
  );
  return {
    url: embedded.url,
    stop: async () => {
      if (await embedded.stop()) logger.info('embedded PostgreSQL stopped');
      else
        logger.warn(
          { dataDir: embedded.dataDir },
          'the embedded PostgreSQL was not running (it had exited and was not restarted); nothing to stop',
        );
    },
    status: () => embedded.status(),
    lost,
  };
}

/** What serve says while it keeps the embedded server running, and the error it exits with. */
function supervisionLog(
  logger: Logger,
  server: () => Awaited<ReturnType<typeof import('../embedded/embedded').startEmbeddedPostgres>>,
  options: OpenOptions,
  giveUp: (error: Error) => void,
): SupervisorEvents {
  const logFile = (): string => postmasterLogFile(server().dataDir);
  let lastExit = '';
  return {
    exited(pid, reason) {
      lastExit = reason;
      logger.error(
        { postmasterPid: pid, reason, dataDir: server().dataDir, log: logFile() },
        `embedded PostgreSQL (PID ${pid}) exited unexpectedly (${reason}); restarting it`,
      );
    },
    restarted(pid, restarts) {
      options.onEmbeddedRestart?.();
      logger.warn(
        { postmasterPid: pid, port: server().port, restarts },
        `embedded PostgreSQL restarted (PID ${pid}, port ${server().port}; restart ${restarts} since the proxy started)`,
      );
    },
    restartFailed(error, attempt, retryInMs) {
      logger.warn(
        { attempt, reason: error.message, retryInMs },
        `embedded PostgreSQL restart ${attempt} of ${RESTART_ATTEMPTS} failed; trying again in ${retryInMs / 1000} s`,
      );
    },
    gaveUp(error, attempts) {
      giveUp(
        new StartupError(
          `the embedded PostgreSQL exited (${lastExit}) and ${attempts} restarts in a row failed (last: ${error.message.replace(/ — full log: .*$/, '')}): read ${logFile()}, fix what it says, and start the proxy again, or set DATABASE_URL to a PostgreSQL of your own`,
          { cause: error },
        ),
      );
    },
  };
}

/** How long startup waits for a database that refuses connections (env IDEMPOTENCY_PROXY_DB_WAIT, seconds). */
export function startupWaitMs(env: NodeJS.ProcessEnv = process.env): number {
  const seconds = Number(env.IDEMPOTENCY_PROXY_DB_WAIT ?? 30);
  return Number.isFinite(seconds) && seconds >= 0 ? seconds * 1000 : 30_000;
}

/**
 * Retries `task` while the database refuses connections, up to `timeoutMs`: one warning when the
 * wait begins, the attempts at debug level, and at the end an error that says what to check.
 */
export async function whenDatabaseReady<T>(
  task: () => Promise<T>,
  logger: Logger,
  url: string,
  timeoutMs = startupWaitMs(),
  tls?: StoreTlsConfig,
): Promise<T> {
  const started = Date.now();
  for (let attempt = 1; ; attempt++) {
    try {
      return await task();
    } catch (error) {
      const waited = Date.now() - started;
      if (waited > timeoutMs || !isConnectionError(error))
        throw databaseStartupError(error, url, waited, tls) ?? error;
      const reason = reasonOf(error);
      if (attempt === 1) {
        logger.warn(
          { server: serverOf(url), reason },
          `PostgreSQL is not reachable yet (${reason}); retrying for up to ${Math.round(timeoutMs / 1000)} s (IDEMPOTENCY_PROXY_DB_WAIT)`,
        );
      } else {
        logger.debug({ reason, attempt }, 'database not reachable yet; retrying');
      }
      await new Promise((resolve) => setTimeout(resolve, Math.min(2_000, 200 * attempt)));
    }
  }
}
