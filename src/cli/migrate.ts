// `idempotency-proxy migrate`: apply the store's migrations and exit (serve does the same at start
// unless store.migrate is false: then this runs first, as a role that may create tables).
import type { Logger } from 'pino';
import type { ProxyConfig } from '../config/types';
import { migrate } from '../db/migrate';
import { openDatabase } from '../db/open-database';
import { migrationRefusedError } from '../db/database-errors';

export async function runMigrate(config: ProxyConfig, logger: Logger): Promise<number> {
  const database = await openDatabase(config, logger, 'migrate');
  try {
    const result = await database.whenReady(() =>
      migrate(database.pool, config.store.table).catch((error: unknown) => {
        throw migrationRefusedError(error) ?? error;
      }),
    );
    logger.info(
      { table: config.store.table, ...result },
      result.applied.length === 0
        ? 'store schema already up to date'
        : `applied ${result.applied.length} migration(s)`,
    );
    return 0;
  } finally {
    await database.close();
  }
}
