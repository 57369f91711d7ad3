// Deletes expired records in batches. One instance prunes at a time (a try-lock: the others skip this
// round rather than queue), and each batch is a short statement that skips rows other transactions
// hold, so pruning a large backlog never blocks claims for long.
import type { Pool } from 'pg';
import { quoteTableName } from './identifier';

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
  const client = await pool.connect();
  try {
    const { rows } = await client.query<{ locked: boolean }>(
      'SELECT pg_try_advisory_lock(hashtext($1::text)) AS locked',
      [lockKey],
    );
    if (!rows[0]?.locked) return { deleted: 0, batches: 0, skipped: true };
    try {
      let deleted = 0;
      let batches = 0;
      while (batches < maxBatches) {
        const result = await client.query(
          `DELETE FROM ${table} WHERE (scope, tenant, key) IN (
             SELECT scope, tenant, key FROM ${table} WHERE prune_after <= now() AND expires_at <= now()
             LIMIT $1::int FOR UPDATE SKIP LOCKED)`,
          [batchSize],
        );
        batches++;
        deleted += result.rowCount ?? 0;
        if ((result.rowCount ?? 0) < batchSize) break;
        if (options.pauseMs) await new Promise((resolve) => setTimeout(resolve, options.pauseMs));
      }
      return { deleted, batches, skipped: false };
    } finally {
      await client.query('SELECT pg_advisory_unlock(hashtext($1::text))', [lockKey]);
    }
  } finally {
    client.release();
  }
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
