// `idempotency-proxy serve`: migrate, listen, and drain on SIGTERM/SIGINT.
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { createApp } from '../app';
import { leaseWarnings } from '../config/lease-warnings';
import type { ProxyConfig } from '../config/types';
import { CompletionListener } from '../db/completion-listener';
import { completionChannel, PostgresKeyStore } from '../db/key-store';
import { migrate } from '../db/migrate';
import { openDatabase, whenDatabaseReady } from './database';

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

  const listener = new CompletionListener(
    database.url,
    completionChannel(config.store.table),
    logger,
  );
  await listener.start();
  const app = createApp({
    config,
    store: new PostgresKeyStore(database.pool, config.store.table),
    logger,
    waiter: listener,
  });
  await new Promise<void>((resolve, reject) => {
    app.server.once('error', reject);
    app.server.listen(config.listen.port, config.listen.host, () => resolve());
  });
  const address = app.server.address() as AddressInfo;
  logger.info(
    {
      host: address.address,
      port: address.port,
      routes: config.routes.length,
      config: config.file,
    },
    `idempotency-proxy listening on http://${address.address}:${address.port}`,
  );

  const signal = await new Promise<NodeJS.Signals>((resolve) => {
    process.once('SIGTERM', () => resolve('SIGTERM'));
    process.once('SIGINT', () => resolve('SIGINT'));
  });
  logger.info(
    { signal, inFlight: app.inFlight(), graceMs: config.shutdownGraceMs },
    'shutting down: draining in-flight requests',
  );
  const forceExit = (): void => {
    logger.warn('second signal: exiting without waiting');
    process.exit(1);
  };
  process.once('SIGTERM', forceExit);
  process.once('SIGINT', forceExit);
  await app.close(config.shutdownGraceMs);
  await listener.close();
  await database.close();
  logger.info('stopped');
  return 0;
}
