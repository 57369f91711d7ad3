// The proxy as a library: what `serve` runs — the store opened (the embedded PostgreSQL when the
// config names none), migrated, the instance composed, both listeners started — for a Node process
// that wants the proxy inside it (a test harness, a larger service) instead of as its own process.
// Signals, exit codes and the config file's reload are the caller's: this never exits the process.
import type { AddressInfo } from 'node:net';
import type { Pool } from 'pg';
import type { Logger } from 'pino';
import pino from 'pino';
import { type OpenDatabase, openDatabase } from './db/open-database';
import { composeProxy, type ProxyInstance } from './compose';
import type { ProxyConfig } from './config/types';
import { migrate } from './db/migrate';
import { checkSchema } from './db/schema-check';
import { migrationRefusedError } from './db/database-errors';
import { type Listener, schemeOf } from './listener';
import { ProxyMetrics } from './metrics';

/** An instance composed on its store, not yet listening. */
export interface OpenProxy {
  readonly database: OpenDatabase;
  readonly instance: ProxyInstance;
}

/**
 * What `serve` and createProxy both do before they listen: open the store (a URL, or the embedded
 * PostgreSQL, supervised, its restarts counted), migrate its table once the database answers (or,
 * with store.migrate false, check that someone did), and compose one instance on it. Nothing is
 * left open when a step fails.
 */
export async function openProxy(
  config: ProxyConfig,
  logger: Logger,
  storeWaitMs?: number,
): Promise<OpenProxy> {
  const metrics = new ProxyMetrics();
  const database = await openStore(config, logger, metrics, storeWaitMs);
  try {
    const instance = await composeProxy({
      config,
      pool: database.pool,
      databaseUrl: database.url,
      logger,
      metrics,
      embedded: database.embeddedStatus,
      prune: true,
    });
    return { database, instance };
  } catch (error) {
    await database.close().catch(() => undefined);
    throw error;
  }
}

/**
 * The store a serving process opens: the configured PostgreSQL or the embedded one (started and
 * supervised, its restarts counted in `metrics`), its table migrated once the database answers (or,
 * with store.migrate false, checked).
 * Nothing is left open when a step fails.
 */
export async function openStore(
  config: ProxyConfig,
  logger: Logger,
  metrics: ProxyMetrics,
  storeWaitMs?: number,
): Promise<OpenDatabase> {
  const database = await openDatabase(config, logger, 'serve', {
    onEmbeddedRestart: () => metrics.embeddedPostgresRestarted(),
  });
  try {
    await database.whenReady(() => prepareSchema(config, database.pool, logger), storeWaitMs);
    return database;
  } catch (error) {
    await database.close().catch(() => undefined);
    throw error;
  }
}

/** Migrates the table, or with store.migrate false only checks it; a refusal says what to do. */
async function prepareSchema(config: ProxyConfig, pool: Pool, logger: Logger): Promise<void> {
  const table = config.store.table;
  if (!config.store.migrate) {
    const { version } = await checkSchema(pool, table);
    logger.info(
      { table, version },
      'store schema checked (store.migrate is false: migrations are run by `idempotency-proxy migrate`)',
    );
    return;
  }
  const migration = await migrate(pool, table).catch((error: unknown) => {
    throw migrationRefusedError(error) ?? error;
  });
  logger.info({ table, ...migration }, 'store schema is up to date');
}

export interface CreateProxyOptions {
  /** Where the proxy logs; silent by default (an embedding process has logs of its own). */
  readonly logger?: Logger;
  /**
   * How long to keep retrying a store that refuses connections before createProxy rejects
   * (IDEMPOTENCY_PROXY_DB_WAIT seconds, else 30 s, as for `serve`).
   */
  readonly storeWaitMs?: number;
}

export interface EmbeddedProxy {
  /** The composed instance: its app, admin listener, store and metrics. */
  readonly instance: ProxyInstance;
  /**
   * Starts the proxy and admin listeners on the config's `listen` and `admin` addresses (port 0 picks
   * a free one) and resolves with the URLs they answer on.
   */
  listen(): Promise<{ readonly url: string; readonly adminUrl: string }>;
  /** Swaps in another config for new requests (the store settings and listeners stay). */
  reload(next: ProxyConfig): void;
  /** Drains in-flight requests for up to graceMs, then stops the listeners and the store. */
  close(graceMs?: number): Promise<void>;
}

/** Opens the store, migrates (or checks) its table and composes one proxy instance; nothing listens yet. */
export async function createProxy(
  config: ProxyConfig,
  options: CreateProxyOptions = {},
): Promise<EmbeddedProxy> {
  const logger = options.logger ?? pino({ level: 'silent' });
  const { database, instance } = await openProxy(config, logger, options.storeWaitMs);
  let closed: Promise<void> | undefined;
  return {
    instance,
    async listen() {
      const current = instance.app.config();
      const url = await listenOn(instance.app.server, current.listen);
      const adminUrl = await listenOn(instance.admin, current.admin);
      return { url, adminUrl };
    },
    reload: (next) => instance.reload(next),
    close(graceMs = 0) {
      closed ??= instance.close(graceMs).finally(() => database.close());
      return closed;
    },
  };
}

async function listenOn(
  server: Listener,
  address: { readonly host: string; readonly port: number },
): Promise<string> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(address.port, address.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { address: host, port } = server.address() as AddressInfo;
  const shown = host.includes(':') ? `[${host}]` : host;
  return `${schemeOf(server)}://${shown}:${port}`;
}
