// Where the keys table lives (docs/store-topologies.md): on one PostgreSQL, or distributed over a Citus
// cluster whose coordinator the URL reaches. The store and the pruner pick their statements by it;
// migrate distributes the table when the citus extension is there.
import type { Client, Pool, PoolClient } from 'pg';
import { quoteTableName } from './identifier';

export type Topology =
  | { readonly kind: 'postgres' }
  | {
      readonly kind: 'citus';
      /** The keys table is a distributed table (migrate makes it one). */
      readonly distributed: boolean;
      /** Nodes that hold shards of the table (workers, or the coordinator itself). */
      readonly nodes: number;
      readonly shards: number;
    };

/** Citus's distribution column for the keys table: part of the primary key, and the most selective part. */
export const DISTRIBUTION_COLUMN = 'key';

type Queryable = Pool | PoolClient | Client;

/** True when the citus extension is installed in this database. */
export async function hasCitus(db: Queryable): Promise<boolean> {
  const { rows } = await db.query<{ citus: boolean }>(
    "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') AS citus",
  );
  return rows[0]?.citus === true;
}

/** True when the table is a Citus distributed table (false on plain PostgreSQL). */
export async function isDistributed(db: Queryable, tableName: string): Promise<boolean> {
  if (!(await hasCitus(db))) return false;
  const { rows } = await db.query<{ distributed: boolean }>(
    `SELECT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = to_regclass($1::text))
       AS distributed`,
    [quoteTableName(tableName)],
  );
  return rows[0]?.distributed === true;
}

export async function detectTopology(db: Queryable, tableName: string): Promise<Topology> {
  if (!(await hasCitus(db))) return { kind: 'postgres' };
  const { rows } = await db.query<{ distributed: boolean; nodes: number; shards: number }>(
    `SELECT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = to_regclass($1::text))
              AS distributed,
            (SELECT count(DISTINCT p.groupid) FROM pg_dist_shard s
               JOIN pg_dist_placement p USING (shardid)
              WHERE s.logicalrelid = to_regclass($1::text))::int AS nodes,
            (SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = to_regclass($1::text))::int
              AS shards`,
    [quoteTableName(tableName)],
  );
  const row = rows[0];
  return {
    kind: 'citus',
    distributed: row?.distributed === true,
    nodes: row?.nodes ?? 0,
    shards: row?.shards ?? 0,
  };
}

/** One line for people (check, logs): where the table lives. */
export function describeTopology(topology: Topology): string {
  if (topology.kind === 'postgres') return 'one PostgreSQL';
  if (!topology.distributed) return 'Citus, table not distributed yet (migrate distributes it)';
  return `Citus, table distributed by ${DISTRIBUTION_COLUMN} in ${topology.shards} shards on ${topology.nodes} node(s)`;
}
