// Opens the store's database for a command: the configured server, or the embedded PostgreSQL when
// no URL is set (SPEC §2). Also waits for a server that is still starting (docker-compose order).
import type { Pool } from 'pg';
import type { Logger } from 'pino';
import type { ProxyConfig } from '../config/types';
import { createPool } from '../db/pool';
import { SQLSTATE } from '../db/sqlstate';

export interface OpenDatabase {
  readonly pool: Pool;
  /** The connection string in use (the embedded server's when it was started). */
  readonly url: string;
  readonly embedded: boolean;
  close(): Promise<void>;
}

export async function openDatabase(config: ProxyConfig, logger: Logger): Promise<OpenDatabase> {
  let url = config.store.url;
  let stopEmbedded: (() => Promise<void>) | undefined;
  if (url === undefined) {
    const { startEmbeddedPostgres } = await import('../db/embedded');
    logger.info(
      { dataDir: config.store.dataDir },
      'no store.url or DATABASE_URL set: starting the embedded PostgreSQL',
    );
    const embedded = await startEmbeddedPostgres({
      dataDir: config.store.dataDir,
      onLog: (line) => logger.debug({ postgres: line }, 'embedded PostgreSQL'),
    });
    logger.info({ dataDir: embedded.dataDir, port: embedded.port }, 'embedded PostgreSQL started');
    url = embedded.url;
    stopEmbedded = async () => {
      await embedded.stop();
      logger.info('embedded PostgreSQL stopped');
    };
  }
  const pool = createPool({
    url,
    size: config.store.poolSize,
    synchronousCommit: config.store.synchronousCommit,
    onError: (error) => logger.warn({ err: error }, 'idle database connection failed'),
  });
  return {
    pool,
    url,
    embedded: stopEmbedded !== undefined,
    async close() {
      await pool.end();
      if (stopEmbedded) await stopEmbedded();
    },
  };
}

/** How long startup waits for a database that refuses connections (env IDEMPOTENCY_PROXY_DB_WAIT, seconds). */
export function startupWaitMs(env: NodeJS.ProcessEnv = process.env): number {
  const seconds = Number(env.IDEMPOTENCY_PROXY_DB_WAIT ?? 30);
  return Number.isFinite(seconds) && seconds >= 0 ? seconds * 1000 : 30_000;
}

/** Retries `task` while the database refuses connections, up to `timeoutMs`. */
export async function whenDatabaseReady<T>(
  task: () => Promise<T>,
  logger: Logger,
  timeoutMs = startupWaitMs(),
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (let attempt = 1; ; attempt++) {
    try {
      return await task();
    } catch (error) {
      if (Date.now() > deadline || !isConnectionError(error)) throw error;
      logger.warn({ err: error, attempt }, 'database not reachable yet; retrying');
      await new Promise((resolve) => setTimeout(resolve, Math.min(2_000, 200 * attempt)));
    }
  }
}

function isConnectionError(error: unknown): boolean {
  const code = (error as { code?: unknown } | undefined)?.code;
  if (
    code === 'ECONNREFUSED' ||
    code === 'ENOTFOUND' ||
    code === 'EAI_AGAIN' ||
    code === 'ECONNRESET'
  )
    return true;
  if (
    code === SQLSTATE.CANNOT_CONNECT_NOW ||
    code === SQLSTATE.ADMIN_SHUTDOWN ||
    code === SQLSTATE.CRASH_SHUTDOWN
  ) {
    return true; // starting up, or restarting
  }
  return /timeout exceeded when trying to connect|Connection terminated/i.test(
    String((error as Error)?.message),
  );
}
