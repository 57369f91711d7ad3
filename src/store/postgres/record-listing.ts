// The admin console's listings: records by state (unknown outcomes, in-flight claims, completed,
// reconciled with the upstream),
// newest first by last_seen_at, in pages with a keyset cursor. Not on the request path.
//
// Cost: unknown outcomes come from their partial index (migration 4), so listing them reads only
// them. In-flight and completed rows have no index of their own, on purpose: one on `state` or
// `last_seen_at` would make every completion or every replay write index entries instead of a HOT
// update. Those listings scan the table (a top-N sort, no large result); each runs under a
// statement timeout so a console left open on a huge table cannot hold a connection for long.
// On Citus each listing is one multi-shard SELECT; ORDER BY + LIMIT + the cursor work there too.
import type { Pool } from 'pg';
import { quoteTableName } from '../../db/identifier';
import { type RecordBasics, type RecordBasicsRow, recordBasics } from './record-queries';
import { inTransaction } from '../../db/transaction';
import { GAVE_UP } from './reconcile-store';

export const LIST_STATES = ['unknown', 'in_flight', 'completed', 'reconciled', 'all'] as const;
export type ListState = (typeof LIST_STATES)[number];

export interface ListQuery {
  readonly state: ListState;
  readonly route?: string;
  readonly limit: number;
  readonly cursor?: ListCursor;
}

/** Where the previous page ended: the sort key of its last row. */
export interface ListCursor {
  /** last_seen_at in microseconds since the epoch (PostgreSQL's own precision), as a decimal string. */
  readonly seenUs: string;
  readonly key: string;
  readonly scope: string;
  readonly tenant: string;
}

/** A listed record: the row's times and counters, without the stored headers, body and history. */
export type RecordSummary = RecordBasics & {
  /** Milliseconds left on an in-progress claim's lease (0 once it has ended); null when completed. */
  leaseLeftMs: number | null;
  /** The stored problem of an unknown outcome (what every repeat is answered with). */
  problem: unknown;
  /**
   * An unknown outcome's reconciliation (docs/reconcile.md): `probing` while probes still ask the
   * upstream, `given_up` once past giveUpAfter (only an operator settles it now); null when no
   * probe was ever set up for it, and on every other record.
   */
  reconcile: 'probing' | 'given_up' | null;
};

export interface RecordPage {
  records: RecordSummary[];
  /** Pass as `cursor` for the next page; null on the last page. */
  nextCursor: string | null;
}

const LIST_TIMEOUT = '5s';
/** An unknown outcome's stored body is the proxy's own problem JSON: a few hundred bytes. */
const PROBLEM_BYTES = 4096;

const FILTERS: Record<ListState, string> = {
  unknown: `outcome_unknown AND state = 'completed'`,
  in_flight: `state = 'in_progress'`,
  completed: `state = 'completed' AND NOT outcome_unknown`,
  // Unknown outcomes a probe found upstream (docs/reconcile.md): rare, found by their history.
  reconciled: `state = 'completed' AND NOT outcome_unknown AND events @> '[{"event":"reconciled"}]'::jsonb`,
  all: 'true',
};

type Row = RecordBasicsRow & {
  seen_us: string;
  lease_left_ms: string | null;
  problem_body: Buffer | null;
  reconcile: 'probing' | 'given_up' | null;
};

export async function listRecords(
  pool: Pool,
  tableName: string,
  query: ListQuery,
): Promise<RecordPage> {
  const params: unknown[] = [];
  const param = (value: unknown, type: string) => {
    params.push(value);
    return `$${params.length}::${type}`;
  };
  const where = [FILTERS[query.state], 'expires_at > now()'];
  if (query.route !== undefined) where.push(`route = ${param(query.route, 'text')}`);
  if (query.cursor) {
    const c = query.cursor;
    where.push(
      `(last_seen_at, key, scope, tenant) < ('epoch'::timestamptz + ${param(c.seenUs, 'bigint')} * interval '1 microsecond', ${param(c.key, 'text')}, ${param(c.scope, 'text')}, ${param(c.tenant, 'text')})`,
    );
  }
  // One row more than asked tells whether there is a next page.
  const limit = param(query.limit + 1, 'int');
  const sql = `
    SELECT scope, tenant, key, route, state, status, outcome_unknown, attempts, replays, created_at,
           completed_at, last_seen_at, (extract(epoch FROM last_seen_at) * 1000000)::bigint::text AS seen_us,
           expires_at, lease_expires_at,
           CASE WHEN state = 'in_progress'
                THEN GREATEST(0, ceil(extract(epoch FROM (lease_expires_at - now())) * 1000))::bigint::text
           END AS lease_left_ms,
           CASE WHEN outcome_unknown THEN substring(body FROM 1 FOR ${PROBLEM_BYTES}) END AS problem_body,
           CASE WHEN outcome_unknown AND state = 'completed' THEN
             CASE WHEN ${GAVE_UP} THEN 'given_up'
                  WHEN probe_after IS NOT NULL OR probes > 0 THEN 'probing' END
           END AS reconcile
    FROM ${quoteTableName(tableName)}
    WHERE ${where.join(' AND ')}
    ORDER BY last_seen_at DESC, key DESC, scope DESC, tenant DESC
    LIMIT ${limit}`;
  const rows = await inTransaction(pool, async (client) => {
    await client.query(`SET LOCAL statement_timeout = '${LIST_TIMEOUT}'`);
    return (await client.query<Row>(sql, params)).rows;
  });
  const page = rows.slice(0, query.limit);
  const last = page.at(-1);
  return {
    records: page.map(toSummary),
    nextCursor:
      rows.length > query.limit && last
        ? encodeCursor({
            seenUs: last.seen_us,
            key: last.key,
            scope: last.scope,
            tenant: last.tenant,
          })
        : null,
  };
}

/** The cursor is opaque to clients: base64url of the sort key, versioned. */
export function encodeCursor(cursor: ListCursor): string {
  return Buffer.from(
    JSON.stringify(['v1', cursor.seenUs, cursor.key, cursor.scope, cursor.tenant]),
  ).toString('base64url');
}

/** undefined for anything this API did not hand out. */
export function decodeCursor(text: string): ListCursor | undefined {
  if (!/^[A-Za-z0-9_-]{1,4096}$/.test(text)) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(Buffer.from(text, 'base64url').toString('utf8'));
  } catch {
    return undefined;
  }
  if (!Array.isArray(value) || value.length !== 5 || value[0] !== 'v1') return undefined;
  const [, seenUs, key, scope, tenant] = value as unknown[];
  if (typeof seenUs !== 'string' || !/^-?\d{1,19}$/.test(seenUs)) return undefined;
  if (typeof key !== 'string' || typeof scope !== 'string' || typeof tenant !== 'string')
    return undefined;
  return { seenUs, key, scope, tenant };
}

function toSummary(row: Row): RecordSummary {
  return {
    ...recordBasics(row),
    leaseLeftMs: row.lease_left_ms === null ? null : Number(row.lease_left_ms),
    problem: row.problem_body ? parseProblem(row.problem_body) : null,
    reconcile: row.reconcile,
  };
}

function parseProblem(body: Buffer): unknown {
  const text = body.toString('utf8');
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return text;
  }
}
