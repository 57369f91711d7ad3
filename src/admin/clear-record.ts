// Clearing a key, the one operator action that changes a record: the admin API's DELETE (/keys and
// /api/records) and `idempotency-proxy clear` all come here, so each deletes the same way, tells
// every replay cache through NOTIFY (record-queries.ts), and logs the same line. The admin API's
// own proxy forgets the record before the clear is answered (`forget`: this process's cache, or
// every worker's on a cluster), so its next request executes; other instances forget it when the
// NOTIFY reaches them (docs/store-topologies.md says how soon).
import type { Pool } from 'pg';
import type { Logger } from 'pino';
import { hashKey } from '../app';
import type { ProxyConfig } from '../config/types';
import { deleteRecord } from '../store/postgres/record-queries';
import { routeOfScope } from '../idempotency/scope';
import type { RecordId } from '../store/record';
import type { AdminDeps, WorkersForgot } from './admin-deps';

export interface Cleared {
  /** False when there was no record. */
  readonly deleted: boolean;
  /** On a cluster's primary: which workers confirmed they forgot it before the clear answered. */
  readonly workers?: WorkersForgot;
}

/** Deletes `id`'s record. */
export async function clearRecord(
  pool: Pool,
  config: ProxyConfig,
  id: RecordId,
  logger: Pick<Logger, 'info' | 'warn'> | undefined,
  via: 'admin' | 'cli',
  /** What the serving processes remember of it (replay caches), dropped once the delete commits. */
  forget?: AdminDeps['forgetRecords'],
): Promise<Cleared> {
  const deleted = await deleteRecord(pool, config.store.table, id);
  // Even when no row was there: memory must not hold what the database does not.
  const workers = await forget?.([id]);
  if (!deleted) return { deleted };
  const route = routeOfScope(config.routes, id.scope);
  const fields = {
    admin: 'clear',
    via,
    scope: id.scope,
    tenant: id.tenant,
    key: route?.idempotency?.logKey === 'hash' ? hashKey(id.key) : id.key,
  };
  const message = 'admin: cleared a record; the next request with its key executes';
  if (!workers?.unconfirmed.length) {
    logger?.info(workers ? { ...fields, workers: workers.asked } : fields, message);
  } else {
    const { asked, unconfirmed } = workers;
    logger?.warn(
      {
        ...fields,
        workers: asked,
        unconfirmedWorkers: unconfirmed.map((worker) => worker.workerPid),
        reasons: unconfirmed.map((worker) => worker.reason),
      },
      `${message}, except on ${unconfirmed.length} of ${asked} workers that did not confirm they forgot it (${unconfirmed[0]!.reason}): they may replay it until the clear's NOTIFY reaches them`,
    );
  }
  return workers ? { deleted, workers } : { deleted };
}

/** A clear asked through the admin listener (/keys, or the console's API): this proxy forgets. */
export function clearByAdmin(
  deps: Pick<AdminDeps, 'pool' | 'logger' | 'forgetRecords'>,
  config: ProxyConfig,
  id: RecordId,
): Promise<Cleared> {
  return clearRecord(deps.pool, config, id, deps.logger, 'admin', deps.forgetRecords);
}
