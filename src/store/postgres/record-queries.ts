// Operator access to records: read one (admin API, `inspect`), find a key across scopes, clear one.
// Not on the request path; plain parameterised statements.
import type { Pool } from 'pg';
import { type RecordId, recordDigest } from '../record';
import { evictionChannel } from './statements';
import { quoteTableName } from '../../db/identifier';
import { inTransaction } from '../../db/transaction';

/** What a record row and its view spell alike: its identity, its state and its answer's status. */
interface RecordHead {
  scope: string;
  tenant: string;
  key: string;
  route: string;
  state: string;
  status: number | null;
}

export interface RecordView extends RecordHead {
  fence: string;
  outcomeUnknown: boolean;
  bodyOmitted: boolean;
  bodyBytes: number | null;
  attempts: number;
  replays: number;
  createdAt: string;
  completedAt: string | null;
  lastSeenAt: string;
  expiresAt: string;
  leaseExpiresAt: string | null;
  expired: boolean;
  headers: [string, string][] | null;
  history: { event: string; at: string; fence: number; status?: number }[];
  body?: EncodedBody | null;
  /**
   * On an unknown outcome whose answer broke off after its head (a stalled or dropped stream): what
   * the upstream had sent, for the operator; never replayed. Null on every other record.
   */
  partialUpstreamAnswer: PartialUpstreamAnswer | null;
}

export interface EncodedBody {
  encoding: 'utf8' | 'base64';
  data: string;
}

export interface PartialUpstreamAnswer {
  status: number;
  headers: [string, string][];
  /** Body bytes the upstream sent before it broke off. */
  bytes: number;
  /** Of those, the first ones kept (up to the route's maxResponseBytes). */
  storedBytes: number;
  /** True when more was sent than kept. */
  cut: boolean;
  /** The kept bytes, when asked for with the body. */
  body?: EncodedBody;
}

const COLUMNS = `scope, tenant, key, route, state, fence::text AS fence, status, outcome_unknown,
  body_omitted, octet_length(body) AS body_bytes, attempts, replays, created_at, completed_at,
  last_seen_at, expires_at, lease_expires_at, expires_at <= now() AS expired, headers, events,
  partial_answer, octet_length(partial_body) AS partial_body_bytes`;
/** The bodies, when asked for. */
const BODIES = ', body, partial_body';

/** A record row as the admin queries select it (record-listing.ts picks from it too). */
export interface RecordRow extends RecordHead {
  fence: string;
  outcome_unknown: boolean;
  body_omitted: boolean;
  body_bytes: number | null;
  attempts: number;
  replays: number;
  created_at: Date;
  completed_at: Date | null;
  last_seen_at: Date;
  expires_at: Date;
  lease_expires_at: Date | null;
  expired: boolean;
  headers: [string, string][] | null;
  events: RecordView['history'];
  partial_answer: { status: number; headers: [string, string][]; bytes: number } | null;
  partial_body_bytes: number | null;
  body?: Buffer | null;
  partial_body?: Buffer | null;
}

export async function findRecord(
  pool: Pool,
  tableName: string,
  id: RecordId,
  withBody = false,
): Promise<RecordView | undefined> {
  const { rows } = await pool.query<RecordRow>(
    `SELECT ${COLUMNS}${withBody ? BODIES : ''} FROM ${quoteTableName(tableName)}
     WHERE scope = $1::text AND tenant = $2::text AND key = $3::text`,
    [id.scope, id.tenant, id.key],
  );
  return rows[0] && toView(rows[0], withBody);
}

/** Every record with this key, whatever its scope or tenant (for `inspect KEY` without --route). */
export async function findRecordsByKey(
  pool: Pool,
  tableName: string,
  key: string,
  withBody = false,
): Promise<RecordView[]> {
  const { rows } = await pool.query<RecordRow>(
    `SELECT ${COLUMNS}${withBody ? BODIES : ''} FROM ${quoteTableName(tableName)} WHERE key = $1::text
     ORDER BY scope, tenant`,
    [key],
  );
  return rows.map((row) => toView(row, withBody));
}

/**
 * Clears a record in any state, so the next request with the key executes, and tells every instance's
 * replay cache to forget it: the NOTIFY is delivered when the DELETE commits, in one transaction. It
 * is a statement of its own so that it runs on the session's server even on Citus, which would send
 * a NOTIFY inside the DELETE to the worker that holds the row, where no replay cache LISTENs.
 */
export async function deleteRecord(pool: Pool, tableName: string, id: RecordId): Promise<boolean> {
  return inTransaction(pool, async (client) => {
    const { rowCount } = await client.query(
      `DELETE FROM ${quoteTableName(tableName)}
       WHERE scope = $1::text AND tenant = $2::text AND key = $3::text`,
      [id.scope, id.tenant, id.key],
    );
    const deleted = rowCount === 1;
    if (deleted) {
      await client.query('SELECT pg_notify($1::text, $2::text)', [
        evictionChannel(tableName),
        recordDigest(id),
      ]);
    }
    return deleted;
  });
}

/** What a listing shows of a record too (record-listing.ts): who it is, its state, counters and times. */
export type RecordBasics = Pick<
  RecordView,
  | keyof RecordHead
  | 'outcomeUnknown'
  | 'attempts'
  | 'replays'
  | 'createdAt'
  | 'completedAt'
  | 'lastSeenAt'
  | 'expiresAt'
  | 'leaseExpiresAt'
>;
export type RecordBasicsRow = Pick<
  RecordRow,
  | keyof RecordHead
  | 'outcome_unknown'
  | 'attempts'
  | 'replays'
  | 'created_at'
  | 'completed_at'
  | 'last_seen_at'
  | 'expires_at'
  | 'lease_expires_at'
>;

export function recordBasics(row: RecordBasicsRow): RecordBasics {
  return {
    scope: row.scope,
    tenant: row.tenant,
    key: row.key,
    route: row.route,
    state: row.state,
    status: row.status,
    outcomeUnknown: row.outcome_unknown,
    attempts: row.attempts,
    replays: row.replays,
    createdAt: row.created_at.toISOString(),
    completedAt: row.completed_at?.toISOString() ?? null,
    lastSeenAt: row.last_seen_at.toISOString(),
    expiresAt: row.expires_at.toISOString(),
    leaseExpiresAt: row.lease_expires_at?.toISOString() ?? null,
  };
}

function toView(row: RecordRow, withBody: boolean): RecordView {
  const view: RecordView = {
    ...recordBasics(row),
    fence: row.fence,
    bodyOmitted: row.body_omitted,
    bodyBytes: row.body_bytes,
    expired: row.expired,
    headers: row.headers,
    history: history(row),
    partialUpstreamAnswer: partialOf(row, withBody),
  };
  if (withBody) view.body = row.body ? encodeBody(row.body) : null;
  return view;
}

function partialOf(row: RecordRow, withBody: boolean): PartialUpstreamAnswer | null {
  const partial = row.partial_answer;
  if (partial === null) return null;
  const storedBytes = row.partial_body_bytes ?? 0;
  const answer: PartialUpstreamAnswer = {
    status: partial.status,
    headers: partial.headers,
    bytes: partial.bytes,
    storedBytes,
    cut: partial.bytes > storedBytes,
  };
  if (withBody) answer.body = encodeBody(row.partial_body ?? Buffer.alloc(0));
  return answer;
}

type HistoryEvent = RecordView['history'][number];

/**
 * A record's history. The store writes only exceptional events (taken_over, settled_unknown,
 * replaced_unknown when the real answer landed after it, reconciled) to
 * `events`; the claim and the completion are read from the row (created_at, completed_at, the fence
 * less its takeovers). Rows written before migration 3 carry every event themselves.
 */
function history(row: RecordRow): HistoryEvent[] {
  const stored = row.events.map((event) => ({ ...event, at: new Date(event.at).toISOString() }));
  if (stored.some((event) => event.event === 'claimed')) return stored;
  const takeovers = stored.filter((event) => event.event === 'taken_over').length;
  const events: HistoryEvent[] = [
    { event: 'claimed', at: row.created_at.toISOString(), fence: Number(row.fence) - takeovers },
    ...stored,
  ];
  const settled = stored.some((event) => event.event === 'settled_unknown');
  if (row.state === 'completed' && row.completed_at && !settled) {
    events.push({
      event: 'completed',
      at: row.completed_at.toISOString(),
      fence: Number(row.fence),
      ...(row.status === null ? {} : { status: row.status }),
    });
  }
  return events;
}

function encodeBody(body: Buffer): EncodedBody {
  const text = body.toString('utf8');
  return Buffer.from(text, 'utf8').equals(body)
    ? { encoding: 'utf8', data: text }
    : { encoding: 'base64', data: body.toString('base64') };
}
