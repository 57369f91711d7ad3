// Clearing a key, the one operator action that changes a record: the admin API's DELETE (/keys and
// /api/records) and `idempotency-proxy clear` all come here, so each deletes the same way, tells
// every replay cache through NOTIFY (record-queries.ts), and logs the same line.
import type { Pool } from 'pg';
import type { Logger } from 'pino';
import { hashKey } from '../app';
import type { ProxyConfig } from '../config/types';
import { deleteRecord } from '../store/postgres/record-queries';
import type { RecordId } from '../store/record';

/** Deletes `id`'s record; false when there was none. */
export async function clearRecord(
  pool: Pool,
  config: ProxyConfig,
  id: RecordId,
  logger: Pick<Logger, 'info'> | undefined,
  via: 'admin' | 'cli',
): Promise<boolean> {
  const deleted = await deleteRecord(pool, config.store.table, id);
  if (!deleted) return false;
  const route = config.routes.find((r) => r.idempotency?.scope === id.scope);
  logger?.info(
    {
      admin: 'clear',
      via,
      scope: id.scope,
      tenant: id.tenant,
      key: route?.idempotency?.logKey === 'hash' ? hashKey(id.key) : id.key,
    },
    'admin: cleared a record; the next request with its key executes',
  );
  return true;
}
