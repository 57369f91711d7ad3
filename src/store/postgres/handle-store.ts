// The handles of long calls (store/handles.ts) in the keys table's `handle` column (migration 7).
// Not on a replay's path: a handle is opened once per long call and read once per poll, so these
// are plain parameterised statements. Each names the full primary key, so on a Citus distributed
// table each goes to one shard; time arithmetic follows sql-time.ts.
import type { Pool } from 'pg';
import { quoteTableName } from '../../db/identifier';
import type { Handle, HandleState, HandleStore } from '../handles';
import type { RecordId } from '../record';
import { toResponse } from './rows';
import { epochMs } from './sql-time';

interface HandleColumn {
  secret: string;
  cancel?: boolean;
}

/** What the statements return of a handle: the column, when its call was claimed, its expiry. */
interface HandleFields {
  handle: HandleColumn;
  created_at_ms: number;
  expires_at_ms: number;
}

interface HandleRow extends HandleFields {
  state: string;
  fence: string;
  status: number | null;
  headers: [string, string][] | null;
  body: Buffer | null;
  body_omitted: boolean;
  outcome_unknown: boolean;
  completed_at_ms: number | null;
  lease_remaining_ms: number | null;
}

const WHERE = 'scope = $1::text AND tenant = $2::text AND key = $3::text';
/** The handle's times: its call's claim, and the record's expiry. */
const TIMES = `${epochMs('created_at')} AS created_at_ms, ${epochMs('expires_at')} AS expires_at_ms`;

export class PostgresHandleStore implements HandleStore {
  private readonly statements: ReturnType<typeof handleStatements>;

  constructor(
    private readonly pool: Pool,
    tableName: string,
  ) {
    this.statements = handleStatements(quoteTableName(tableName));
  }

  async open(id: RecordId, secret: string): Promise<Handle | null> {
    const { rows } = await this.pool.query<HandleFields>(this.statements.open, [
      id.scope,
      id.tenant,
      id.key,
      JSON.stringify({ secret }),
    ]);
    return rows[0] ? handleOf(rows[0]) : null;
  }

  async read(id: RecordId): Promise<HandleState | undefined> {
    const { rows } = await this.pool.query<HandleRow>(this.statements.read, [
      id.scope,
      id.tenant,
      id.key,
    ]);
    const row = rows[0];
    if (row === undefined) return undefined;
    const handle = handleOf(row);
    if (row.state === 'completed')
      return {
        kind: 'done',
        handle,
        response: toResponse({ ...row, status: row.status!, headers: row.headers ?? [] }),
        completedAt: row.completed_at_ms ?? handle.createdAt,
      };
    const leaseRemainingMs = row.lease_remaining_ms ?? 0;
    if (leaseRemainingMs > 0) return { kind: 'running', handle, leaseRemainingMs };
    return { kind: 'abandoned', handle, fence: row.fence };
  }

  async requestCancel(id: RecordId, secret: string): Promise<boolean> {
    const { rowCount } = await this.pool.query(this.statements.requestCancel, [
      id.scope,
      id.tenant,
      id.key,
      secret,
    ]);
    return (rowCount ?? 0) > 0;
  }
}

function handleOf({ handle, created_at_ms, expires_at_ms }: HandleFields): Handle {
  return {
    secret: handle.secret,
    createdAt: created_at_ms,
    expiresAt: expires_at_ms,
    cancelRequested: handle.cancel === true,
  };
}

function handleStatements(t: string) {
  return {
    // The first handle wins, and later ones get it. Its time is its call's claim (created_at):
    // Citus allows only IMMUTABLE functions inside a CASE or COALESCE, so no now() there.
    open: `
      UPDATE ${t} SET handle = COALESCE(handle, $4::jsonb)
      WHERE ${WHERE} AND state = 'in_progress' AND lease_expires_at > now()
      RETURNING handle, ${TIMES}`,
    read: `
      SELECT state, handle, ${TIMES}, claim_token::text AS fence, status, headers, body,
             body_omitted, outcome_unknown, ${epochMs('completed_at')} AS completed_at_ms,
             GREATEST(0, ceil(extract(epoch FROM (lease_expires_at - now())) * 1000))::int
               AS lease_remaining_ms
      FROM ${t} WHERE ${WHERE} AND expires_at > now() AND handle IS NOT NULL`,
    requestCancel: `
      UPDATE ${t} SET handle = handle || '{"cancel": true}'::jsonb
      WHERE ${WHERE} AND state = 'in_progress' AND handle->>'secret' = $4::text`,
  } as const;
}
