// Clearing a key, the one operator action that changes a record: the admin API's DELETE (/keys and
// /api/records) and `idempotency-proxy clear` all come here, so each deletes the same way, tells
// every replay cache through NOTIFY (record-queries.ts), and logs the same line. The admin API's
// own instance forgets the record before the clear is answered (`forget`), so its next request
// executes; the others forget it when the NOTIFY reaches them (docs/store-topologies.md says how
// soon).
import type { Pool } from 'pg';
import type { Logger } from 'pino';
import { hashKey } from '../app';
import type { ProxyConfig } from '../config/types';
import { deleteRecord } from '../store/postgres/record-queries';
import { routeOfScope } from '../idempotency/scope';
import type { RecordId } from '../store/record';
import type { AdminDeps } from './admin-deps';

/** Deletes `id`'s record; false when there was none. */
export async function clearRecord(
  pool: Pool,
  config: ProxyConfig,
  id: RecordId,
  logger: Pick<Logger, 'info'> | undefined,
  via: 'admin' | 'cli',
  /** This process's memory of the record (the replay cache), dropped once the delete committed. */
  forget?: (id: RecordId) => void,
): Promise<boolean> {
  const deleted = await deleteRecord(pool, config.store.table, id);
  // Even when no row was there: memory must not hold what the database does not.
  forget?.(id);
  if (!deleted) return false;
  const route = routeOfScope(config.routes, id.scope);
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

/** A clear asked through the admin listener (/keys, or the console's API): this instance forgets. */
export function clearByAdmin(
  deps: Pick<AdminDeps, 'pool' | 'logger' | 'forgetRecord'>,
  config: ProxyConfig,
  id: RecordId,
): Promise<boolean> {
  return clearRecord(deps.pool, config, id, deps.logger, 'admin', deps.forgetRecord);
}
