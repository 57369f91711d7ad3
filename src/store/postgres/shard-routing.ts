// On a Citus distributed table: which shard each key is on, by the shard map this process reads
// (db/shard-map.ts) and refreshes when it is old, so that a batch of claims or completions is one
// shard's and Citus routes it to that shard alone (a statement over several shards would be a
// distributed transaction, with a two-phase commit on every worker it touches).
import type { Pool } from 'pg';
import { ShardMap } from '../../db/shard-map';

const SHARD_MAP_MAX_AGE_MS = 60_000;

export class ShardRouting {
  private shards: ShardMap | undefined;
  private loadedAt = 0;
  private loading: Promise<void> | undefined;

  constructor(
    private readonly pool: Pool,
    private readonly tableName: string,
  ) {}

  /**
   * Reads the shard map; a failed read leaves the one it had (or none: every key in one group, and
   * Citus still routes each statement by its rows). Never rejects.
   */
  load(): Promise<void> {
    this.loading ??= ShardMap.load(this.pool, this.tableName)
      .then(
        (shards) => {
          this.shards = shards;
        },
        () => undefined,
      )
      .finally(() => {
        this.loadedAt = Date.now();
        this.loading = undefined;
      });
    return this.loading;
  }

  /** The shard of `key` by the map this process has (0 on plain PostgreSQL), refreshed when old. */
  shardOf(key: string): number {
    const shards = this.shards;
    if (!shards) return 0;
    if (Date.now() - this.loadedAt > SHARD_MAP_MAX_AGE_MS) void this.load();
    return shards.shardOf(key);
  }

  /**
   * A batch's items by shard, when they are on more than one (else undefined): a batch formed while
   * the shard map was not known yet, or before it changed.
   */
  split<T>(batch: readonly T[], keyOf: (item: T) => string): number[][] | undefined {
    const parts = new Map<number, number[]>();
    batch.forEach((item, index) => {
      const shard = this.shardOf(keyOf(item));
      const part = parts.get(shard);
      if (part) part.push(index);
      else parts.set(shard, [index]);
    });
    return parts.size > 1 ? [...parts.values()] : undefined;
  }
}

/** Runs each part (indexes into batch) as a statement of its own, side by side; results in order. */
export async function inParts<T, R>(
  batch: readonly T[],
  parts: readonly number[][],
  run: (part: T[]) => Promise<R[]>,
): Promise<R[]> {
  const results = new Array<R>(batch.length);
  await Promise.all(
    parts.map(async (part) => {
      const partResults = await run(part.map((index) => batch[index]!));
      part.forEach((index, k) => (results[index] = partResults[k]!));
    }),
  );
  return results;
}
