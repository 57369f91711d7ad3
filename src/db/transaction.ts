// One transaction on one pooled connection, for the statements that must share one (migrations and
// pruning under their advisory locks, an operator clear and its NOTIFY).
import type { Pool, PoolClient } from 'pg';

/** Runs `work` between BEGIN and COMMIT; ROLLBACK when it throws. */
export async function inTransaction<T>(
  pool: Pool,
  work: (client: PoolClient) => Promise<T>,
): Promise<T> {
  const client = await pool.connect();
  let failed: unknown;
  try {
    await client.query('BEGIN');
    const result = await work(client);
    await client.query('COMMIT');
    return result;
  } catch (error) {
    failed = error;
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  } finally {
    // A connection that failed mid-transaction is not handed out again.
    client.release(failed instanceof Error ? failed : undefined);
  }
}
