// Deletes expired records in batches. One instance prunes at a time (a try-lock: the others skip
// rather than queue), and each batch is a short transaction that skips rows other transactions hold,
// so pruning a large backlog never blocks claims for long.
//
// On a Citus distributed table a batch is the one statement that reaches every shard, and Citus
// cannot lock rows FOR UPDATE across shards: it picks up to a batch of expired keys first, then
// deletes those that are still expired (a claim may have taken one afresh in between), waiting for
// a row a claim holds rather than skipping it. The advisory lock is the coordinator's.
import type { Pool } from 'pg';
import { quoteTableName } from '../../db/identifier';
import { isDistributed } from '../../db/topology';
import { inTransaction } from '../../db/transaction';

export interface PruneOptions {
  readonly batchSize?: number;
  /** Pause between batches, to leave room for request traffic. */
  readonly pauseMs?: number;
  /** Stop after this many batches (the next round continues). */
  readonly maxBatches?: number;
}

export interface PruneResult {
  readonly deleted: number;
  readonly batches: number;
  /** True when another instance held the prune lock, so this one did nothing. */
  readonly skipped: boolean;
}

export async function pruneExpired(
  pool: Pool,
  tableName: string,
  options: PruneOptions = {},
): Promise<PruneResult> {
  const table = quoteTableName(tableName);
  const batchSize = options.batchSize ?? 1_000;
  const maxBatches = options.maxBatches ?? Number.POSITIVE_INFINITY;
  const lockKey = `idempotency-proxy:prune:${tableName}`;
  const statement = (await isDistributed(pool, tableName))
    ? distributedBatchStatement(table)
    : batchStatement(table);
  let deleted = 0;
  let batches = 0;
  while (batches < maxBatches) {
    const result = await pruneBatch(pool, statement, lockKey, batchSize);
    // Another instance holds the lock: it prunes this round (or the rest of it).
    if (result === undefined) return { deleted, batches, skipped: batches === 0 };
    batches++;
    deleted += result;
    if (result < batchSize) break;
    if (options.pauseMs) await new Promise((resolve) => setTimeout(resolve, options.pauseMs));
  }
  return { deleted, batches, skipped: false };
}

const EXPIRED = 'prune_after <= now() AND expires_at <= now()';

function batchStatement(table: string): string {
  return `DELETE FROM ${table} WHERE (scope, tenant, key) IN (
         SELECT scope, tenant, key FROM ${table} WHERE ${EXPIRED}
         LIMIT $1::int FOR UPDATE SKIP LOCKED)`;
}

function distributedBatchStatement(table: string): string {
  return `DELETE FROM ${table} WHERE (scope, tenant, key) IN (
         SELECT scope, tenant, key FROM ${table} WHERE ${EXPIRED} LIMIT $1::int)
       AND ${EXPIRED}`;
}

/**
 * One batch in one transaction, under a transaction-level try-lock: the lock ends with the
 * transaction, so it never outlives it, even behind a transaction pooler (PgBouncer in transaction
 * mode), where a session lock would stay on whichever server connection took it. Returns the rows
 * deleted, or undefined when another instance holds the lock.
 */
async function pruneBatch(
  pool: Pool,
  statement: string,
  lockKey: string,
  batchSize: number,
): Promise<number | undefined> {
  return inTransaction(pool, async (client) => {
    const { rows } = await client.query<{ locked: boolean }>(
      'SELECT pg_try_advisory_xact_lock(hashtext($1::text)) AS locked',
      [lockKey],
    );
    // Not locked: this transaction has done nothing, so its COMMIT is as good as a ROLLBACK.
    if (!rows[0]?.locked) return undefined;
    const result = await client.query(statement, [batchSize]);
    return result.rowCount ?? 0;
  });
}

export interface BackgroundPruner {
  stop(): Promise<void>;
}

/** Runs pruneExpired every `intervalMs` until stopped; failures are reported and retried next round. */
export function startPruner(
  pool: Pool,
  tableName: string,
  intervalMs: number,
  report: { pruned(result: PruneResult): void; failed(error: unknown): void },
): BackgroundPruner {
  let running: Promise<void> | undefined;
  const round = (): void => {
    if (running) return;
    running = pruneExpired(pool, tableName, { pauseMs: 10 })
      .then(report.pruned, report.failed)
      .finally(() => (running = undefined));
  };
  const timer = setInterval(round, intervalMs);
  timer.unref();
  return {
    async stop() {
      clearInterval(timer);
      await running;
    },
  };
}
