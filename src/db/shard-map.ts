// Which Citus shard a key lives on, worked out here: the shards' hash ranges are read once from the
// coordinator's catalog (pg_dist_shard), and a key's hash is hashtext() computed in this process
// (hash-text.ts). The store groups a batch by it, so that each statement touches one shard: Citus
// routes it straight to that shard's worker, where a statement over several shards would be a
// distributed transaction. A map gone stale (shards split or moved since) costs speed, not
// correctness: Citus routes every statement by its rows itself, a misgrouped one merely spans shards.
import type { Client, Pool, PoolClient } from 'pg';
import { hashText } from './hash-text';
import { quoteTableName } from './identifier';

type Queryable = Pool | PoolClient | Client;

export class ShardMap {
  /**
   * @param lowest each shard's lowest hash, ascending; shards cover the whole int4 range without
   *   gaps, so a hash belongs to the last shard whose lowest hash is at most it.
   */
  private constructor(
    private readonly lowest: Int32Array,
    readonly shardIds: readonly string[],
  ) {}

  static async load(db: Queryable, tableName: string): Promise<ShardMap> {
    const { rows } = await db.query<{ shardid: string; low: number }>(
      `SELECT shardid::text AS shardid, shardminvalue::int AS low FROM pg_dist_shard
        WHERE logicalrelid = to_regclass($1::text) ORDER BY shardminvalue::int`,
      [quoteTableName(tableName)],
    );
    return ShardMap.of(rows.map((row) => [row.low, row.shardid]));
  }

  /** A map from each shard's lowest hash and id (tests build one without a cluster). */
  static of(shards: readonly (readonly [low: number, shardId: string])[]): ShardMap {
    const sorted = [...shards].sort((x, y) => x[0] - y[0]);
    return new ShardMap(
      Int32Array.from(sorted.map(([low]) => low)),
      sorted.map(([, id]) => id),
    );
  }

  get size(): number {
    return this.lowest.length;
  }

  /** The index (0 … size − 1, in hash order) of the shard that holds `key`; 0 when there are none. */
  shardOf(key: string): number {
    const hash = hashText(key);
    let low = 0;
    let high = this.lowest.length - 1;
    while (low < high) {
      const middle = (low + high + 1) >> 1;
      if (this.lowest[middle]! <= hash) low = middle;
      else high = middle - 1;
    }
    return low;
  }
}
