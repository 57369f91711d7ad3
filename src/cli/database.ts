// Opens the store's database for a command: the configured server, or the embedded PostgreSQL when
// no URL is set (README.md#quick-start) — for an operator command, the one a running proxy already
// started on the same data directory if there is one. Also waits for a server that is still
// starting (docker-compose order), saying so in one line rather than a stack trace per attempt.
import type { Pool } from 'pg';
import type { Logger } from 'pino';
import { settingName } from '../config/env-sources';
import type { ProxyConfig, StoreTlsConfig } from '../config/types';
import { createPool } from '../db/pool';
import type { Command } from './args';
import { databaseStartupError, isConnectionError, reasonOf, serverOf } from './database-errors';

export interface OpenDatabase {
  readonly pool: Pool;
  /** The connection string in use (the embedded server's when it was started). */
  readonly url: string;
  readonly embedded: boolean;
  /** Runs `task`, retrying while the database refuses connections for up to `waitMs` (startupWaitMs). */
  whenReady<T>(task: () => Promise<T>, waitMs?: number): Promise<T>;
  close(): Promise<void>;
}

export async function openDatabase(
  config: ProxyConfig,
  logger: Logger,
  command: Command,
): Promise<OpenDatabase> {
  let url = config.store.url;
  let stopEmbedded: (() => Promise<void>) | undefined;
  if (url === undefined)
    ({ url, stop: stopEmbedded } = await openEmbedded(config, logger, command));
  const tls = config.store.url === undefined ? undefined : config.store.tls;
  const pool = createPool({
    url,
    tls,
    size: config.store.poolSize,
    synchronousCommit: config.store.synchronousCommit,
    onError: (error) => logger.warn({ err: error }, 'idle database connection failed'),
  });
  const connectionUrl = url;
  return {
    pool,
    url,
    embedded: config.store.url === undefined,
    whenReady: (task, waitMs) => whenDatabaseReady(task, logger, connectionUrl, waitMs, tls),
    async close() {
      await pool.end();
      if (stopEmbedded) await stopEmbedded();
    },
  };
}

/** The embedded server's URL, and how to stop it when this command started it. */
async function openEmbedded(
  config: ProxyConfig,
  logger: Logger,
  command: Command,
): Promise<{ url: string; stop: (() => Promise<void>) | undefined }> {
  const dataDir = config.store.dataDir;
  const embeddedModule = await import('../db/embedded');
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
    return { url: running.url, stop: undefined };
  };
  if (command !== 'serve') {
    const running = await awaitRunningEmbedded(dataDir);
    if (running) return useRunning(running);
  }
  logger.info({ dataDir }, 'no store.url or DATABASE_URL set: starting the embedded PostgreSQL');
  let embedded: Awaited<ReturnType<typeof startEmbeddedPostgres>>;
  try {
    embedded = await startEmbeddedPostgres({
      dataDir,
      owner: `idempotency-proxy ${command}`,
      shortLived: command !== 'serve',
      dataDirSetting: settingName(config, 'store.dataDir'),
      onLog: (line) => logger.debug({ postgres: line }, 'embedded PostgreSQL'),
      onNotice: (message) => logger.info({ dataDir }, message),
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
      await embedded.stop();
      logger.info('embedded PostgreSQL stopped');
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
