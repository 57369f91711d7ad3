// The Postgres KeyStore: one named, parameterised statement per operation. Time comes from Postgres
// (now(), intervals), never from this process's clock, so instances with skewed clocks agree.
import { createHash, randomUUID } from 'node:crypto';
import type { Pool, QueryConfig, QueryResult, QueryResultRow } from 'pg';
import type {
  ClaimRequest,
  ClaimResult,
  HeaderPairs,
  KeyStore,
  PeekResult,
  RecordId,
  StoredResponse,
} from '../idempotency/record';
import { recordDigest, recordText } from '../idempotency/record';
import type { CounterDelta } from '../idempotency/replay-cache';
import { quoteTableName } from './identifier';
import { type BatcherStats, NaturalBatcher } from './natural-batcher';
import { SQLSTATE } from './sqlstate';

interface ClaimRow {
  scope: string;
  tenant: string;
  key: string;
  claim_token: string;
  state: string;
  fence: string;
  fingerprint: Buffer;
  status: number | null;
  headers: [string, string][] | null;
  body: Buffer | null;
  body_omitted: boolean;
  outcome_unknown: boolean;
  lease_remaining_ms: number;
  attempts: number;
  expires_in_ms: number;
}

/** The claim statement's RETURNING list, in order (rowMode: 'array'). */
type ClaimRowValues = [
  scope: string,
  tenant: string,
  key: string,
  claim_token: string,
  state: string,
  fence: string,
  fingerprint: Buffer,
  status: number | null,
  headers: [string, string][] | null,
  body: Buffer | null,
  body_omitted: boolean,
  outcome_unknown: boolean,
  attempts: number,
  lease_remaining_ms: number,
  expires_in_ms: number,
];

function claimRow(values: ClaimRowValues): ClaimRow {
  const [scope, tenant, key, claim_token, state, fence, fingerprint, status, headers, body] =
    values;
  return {
    scope,
    tenant,
    key,
    claim_token,
    state,
    fence,
    fingerprint,
    status,
    headers,
    body,
    body_omitted: values[10],
    outcome_unknown: values[11],
    attempts: values[12],
    lease_remaining_ms: values[13],
    expires_in_ms: values[14],
  };
}

interface ResponseRow {
  status: number;
  headers: [string, string][];
  body: Buffer | null;
  body_omitted: boolean;
  outcome_unknown: boolean;
}

const ms = (param: string): string => `make_interval(secs => ${param}::bigint / 1000.0)`;

/** A one-element jsonb array for the record's history (migration 2). */
function event(name: string, fence: string, status?: string): string {
  const statusPart = status ? `, 'status', ${status}` : '';
  return `jsonb_build_array(jsonb_build_object('event', ${name}, 'at', now(), 'fence', ${fence}${statusPart}))`;
}

/** Column assignments of the claim's ON CONFLICT branch: an expired row is claimed afresh. */
function claimUpsertAssignments(): string {
  const expired = 'r.expires_at <= now()';
  const fresh: Record<string, [string, string]> = {
    route: ['excluded.route', 'r.route'],
    fingerprint: ['excluded.fingerprint', 'r.fingerprint'],
    state: ["'in_progress'", 'r.state'],
    claim_token: ['excluded.claim_token', 'r.claim_token'],
    fence: ['r.fence + 1', 'r.fence'],
    lease_expires_at: ['excluded.lease_expires_at', 'r.lease_expires_at'],
    status: ['NULL', 'r.status'],
    headers: ['NULL', 'r.headers'],
    body: ['NULL', 'r.body'],
    body_omitted: ['false', 'r.body_omitted'],
    outcome_unknown: ['false', 'r.outcome_unknown'],
    attempts: ['1', 'r.attempts + 1'],
    created_at: ['now()', 'r.created_at'],
    completed_at: ['NULL', 'r.completed_at'],
    expires_at: ['excluded.expires_at', 'r.expires_at'],
    prune_after: ['excluded.prune_after', 'r.prune_after'],
    // The claim and the completion are read from created_at/completed_at (record-queries.ts): only
    // the exceptional events are written.
    events: ["'[]'::jsonb", 'r.events'],
  };
  const assignments = Object.entries(fresh).map(
    ([column, [whenExpired, otherwise]]) =>
      `${column} = CASE WHEN ${expired} THEN ${whenExpired} ELSE ${otherwise} END`,
  );
  assignments.push(
    `replays = CASE WHEN ${expired} THEN 0
                    WHEN r.state = 'completed' AND r.fingerprint = excluded.fingerprint THEN r.replays + 1
                    ELSE r.replays END`,
    'last_seen_at = now()',
  );
  return assignments.join(',\n        ');
}

/** Parameters per completion in the complete statement; $1 is the NOTIFY channel. */
const COMPLETE_ROW_PARAMS = 11;

/**
 * recordDigest (record.ts) computed by PostgreSQL: base64url of the SHA-256 of
 * "scope\ntenant\nkey", no padding. Completions use it for the rare rows they announce, so the
 * request path hashes nothing for it.
 */
function recordDigestSql(scope: string, tenant: string, key: string): string {
  const text = `${scope} || E'\\n' || ${tenant} || E'\\n' || ${key}`;
  return `translate(rtrim(encode(sha256(convert_to(${text}, 'UTF8')), 'base64'), '='), '+/', '-_')`;
}

/**
 * Completion: one statement for one or several completions (natural batching, natural-batcher.ts), a
 * VALUES row each with its own fence check. It nudges waiters (onConcurrent: wait) with NOTIFY only
 * for records another request has seen while they ran (attempts > 1). Returns the ordinals of the
 * rows it changed.
 */
export function completeStatement(tableName: string, rows: number): string {
  const t = quoteTableName(tableName);
  const types = [
    'int',
    'text',
    'text',
    'text',
    'bigint',
    'smallint',
    'jsonb',
    'bytea',
    'boolean',
    'boolean',
    'bigint',
  ];
  const values: string[] = [];
  for (let row = 0; row < rows; row++) {
    const first = 2 + row * COMPLETE_ROW_PARAMS;
    values.push(`(${types.map((type, k) => `$${first + k}::${type}`).join(', ')})`);
  }
  return `
      WITH done AS (
        UPDATE ${t} AS r SET state = 'completed', status = i.status, headers = i.headers, body = i.body,
               body_omitted = i.body_omitted, outcome_unknown = i.outcome_unknown, completed_at = now(),
               lease_expires_at = NULL, expires_at = now() + ${ms('i.ttl_ms')},
               prune_after = GREATEST(r.prune_after, now() + ${ms('i.ttl_ms')})
        FROM (VALUES ${values.join(',\n               ')})
          AS i(n, scope, tenant, key, fence, status, headers, body, body_omitted, outcome_unknown, ttl_ms)
        WHERE r.scope = i.scope AND r.tenant = i.tenant AND r.key = i.key AND r.fence = i.fence
          AND r.state = 'in_progress'
        RETURNING i.n, r.scope, r.tenant, r.key, r.attempts
      ), nudge AS (
        SELECT pg_notify($1::text, ${recordDigestSql('scope', 'tenant', 'key')}) FROM done WHERE attempts > 1
      )
      SELECT n, (SELECT count(*) FROM nudge)::int AS nudged FROM done`;
}

/** Parameters per claim in the claim statement. */
const CLAIM_ROW_PARAMS = 8;

/**
 * Claim-or-read, for one or several requests in one statement (natural batching): a VALUES row each,
 * distinct keys, sorted so that concurrent batches lock rows in one order. A new row, or an expired
 * one, is claimed (its claim_token is the request's); any other row is returned as it stands, with
 * the audit counters bumped. Rows come back keyed by (scope, tenant, key); the request compares the
 * token and fingerprint itself.
 */
export function claimStatement(tableName: string, rows: number): string {
  const values: string[] = [];
  for (let row = 0; row < rows; row++) {
    const p = (k: number): string => `$${1 + row * CLAIM_ROW_PARAMS + k}`;
    values.push(
      `(${p(0)}::text, ${p(1)}::text, ${p(2)}::text, ${p(3)}::text, ${p(4)}::bytea, 'in_progress', ` +
        `${p(5)}::uuid, 1, now() + ${ms(p(6))}, now() + ${ms(p(7))}, now() + ${ms(p(7))})`,
    );
  }
  return `
      INSERT INTO ${quoteTableName(tableName)} AS r (scope, tenant, key, route, fingerprint, state,
                             claim_token, fence, lease_expires_at, expires_at, prune_after)
      VALUES ${values.join(',\n             ')}
      ON CONFLICT (scope, tenant, key) DO UPDATE SET
        ${claimUpsertAssignments()}
      RETURNING
        r.scope, r.tenant, r.key,
        r.claim_token::text AS claim_token,
        r.state,
        r.fence::text AS fence,
        r.fingerprint,
        r.status,
        r.headers,
        r.body,
        r.body_omitted,
        r.outcome_unknown,
        r.attempts,
        GREATEST(0, ceil(extract(epoch FROM (r.lease_expires_at - now())) * 1000))::int
          AS lease_remaining_ms,
        floor(extract(epoch FROM (r.expires_at - now())) * 1000)::bigint::float8 AS expires_in_ms`;
}

export function buildStatements(tableName: string) {
  const t = quoteTableName(tableName);
  const where = 'scope = $1::text AND tenant = $2::text AND key = $3::text';
  return {
    // Release (like completion, completeStatement) nudges waiters (onConcurrent: wait) with NOTIFY,
    // but only when another request has seen the key while it ran (attempts > 1): the common path pays
    // nothing for it.
    release: `
      WITH done AS (
        DELETE FROM ${t} WHERE ${where} AND fence = $4::bigint AND state = 'in_progress'
        RETURNING attempts
      ), nudge AS (SELECT pg_notify($5::text, $6::text) FROM done WHERE attempts > 1)
      SELECT (SELECT count(*) FROM done)::int AS changed, (SELECT count(*) FROM nudge)::int AS nudged`,
    takeOver: `
      UPDATE ${t} SET claim_token = $5::uuid, fence = fence + 1, lease_expires_at = now() + ${ms('$6')},
             expires_at = GREATEST(expires_at, now() + ${ms('$7')}),
             prune_after = GREATEST(prune_after, now() + ${ms('$7')}),
             events = events || ${event("'taken_over'", 'fence + 1')}
      WHERE ${where} AND fence = $4::bigint AND state = 'in_progress' AND lease_expires_at <= now()
      RETURNING fence::text AS fence`,
    settleUnknown: `
      WITH done AS (
        UPDATE ${t} SET state = 'completed', status = $5::smallint, headers = $6::jsonb, body = $7::bytea,
               body_omitted = false, outcome_unknown = true, completed_at = now(),
               lease_expires_at = NULL, expires_at = now() + ${ms('$8')},
               prune_after = GREATEST(prune_after, now() + ${ms('$8')}), replays = replays + 1,
               events = events || ${event("'settled_unknown'", 'fence', '$5::smallint')}
        WHERE ${where} AND fence = $4::bigint AND state = 'in_progress' AND lease_expires_at <= now()
        RETURNING status, headers, body, body_omitted, outcome_unknown, attempts
      ), nudge AS (SELECT pg_notify($9::text, $10::text) FROM done WHERE attempts > 1)
      SELECT done.*, (SELECT count(*) FROM nudge)::int AS nudged FROM done`,
    // Counter increments gathered by the replay cache, one statement per flush.
    flushCounters: `
      UPDATE ${t} AS r SET attempts = r.attempts + d.attempts, replays = r.replays + d.replays,
             last_seen_at = now()
      FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::int[])
        AS d(scope, tenant, key, attempts, replays)
      WHERE r.scope = d.scope AND r.tenant = d.tenant AND r.key = d.key AND r.state = 'completed'`,
    // Read-only look for waiters: no counters bumped, nothing locked.
    peek: `
      SELECT state, fingerprint = $4::bytea AS same_fingerprint, expires_at <= now() AS expired,
             GREATEST(0, ceil(extract(epoch FROM (lease_expires_at - now())) * 1000))::int
               AS lease_remaining_ms
      FROM ${t} WHERE ${where}`,
  } as const;
}

export interface KeyStoreOptions {
  /**
   * Claim statements, and completion statements, run at once (natural batching); calls beyond wait
   * and go together in the next one.
   */
  readonly lanes?: number;
  /** Calls per statement at most. */
  readonly maxBatch?: number;
  /**
   * false: every statement is sent unnamed (parsed on each call). Behind a transaction pooler such as
   * PgBouncer 1.18 in transaction mode a named statement does not survive between transactions; the
   * store also finds that out by itself (see `sendStatement`), this only skips the first failures.
   */
  readonly namedStatements?: boolean;
  /** Called once when the store stops naming statements because one did not survive. */
  readonly onNamedStatementsLost?: (error: Error) => void;
}

const DEFAULT_LANES = 2;
const DEFAULT_MAX_BATCH = 32;

interface PendingClaim {
  readonly request: ClaimRequest;
  readonly token: string;
}

interface Completion {
  readonly id: RecordId;
  readonly fence: string;
  readonly response: StoredResponse;
  readonly ttlMs: number;
}

/**
 * A statement's name is a digest of its text: sessions that end up on one server connection (a
 * transaction pooler hands server connections around) can then only ever meet a statement of that
 * name with the same text, even across proxy versions, and the name stays within PostgreSQL's 63
 * bytes whatever the table is called.
 */
export function statementName(kind: string, text: string): string {
  return `ip_${kind}_${createHash('sha256').update(text).digest('hex').slice(0, 20)}`;
}

/**
 * A named statement this connection prepared is not in the server session that got the call
 * (26000), or another session's is (42P05): a transaction pooler moved us. Both fail at Parse or
 * Bind, before anything runs, so the call can be sent again.
 */
function namedStatementLost(error: unknown): boolean {
  const code = (error as { code?: unknown }).code;
  return (
    code === SQLSTATE.INVALID_SQL_STATEMENT_NAME || code === SQLSTATE.DUPLICATE_PREPARED_STATEMENT
  );
}

type Statements = ReturnType<typeof buildStatements>;

/** One call of a named statement (rowMode: 'array' returns rows as arrays). */
type Statement = QueryConfig & { name: string; rowMode?: 'array' };

export class PostgresKeyStore implements KeyStore {
  private readonly sql: Statements;
  private readonly names: Record<keyof Statements, string>;
  private readonly channel: string;
  private named: boolean;
  private readonly onNamedStatementsLost: ((error: Error) => void) | undefined;

  private readonly claims: NaturalBatcher<PendingClaim, ClaimResult>;
  private readonly completions: NaturalBatcher<Completion, boolean>;
  private readonly statements = new Map<string, { name: string; text: string }>();

  constructor(
    private readonly pool: Pool,
    private readonly tableName: string,
    options: KeyStoreOptions = {},
  ) {
    this.sql = buildStatements(tableName);
    const lanes = options.lanes ?? DEFAULT_LANES;
    const maxBatch = options.maxBatch ?? DEFAULT_MAX_BATCH;
    const retryAlone = (error: unknown): boolean =>
      (error as { code?: unknown }).code === SQLSTATE.DEADLOCK_DETECTED;
    this.claims = new NaturalBatcher((batch) => this.claimBatch(batch), {
      lanes,
      maxBatch,
      // One INSERT … ON CONFLICT may not touch a row twice: a repeat of a key already being claimed
      // (a retry storm on one key) runs as its own statement, as it would without batching.
      keyOf: ({ request: { id } }) => recordText(id),
      retryAlone,
    });
    this.completions = new NaturalBatcher((batch) => this.completeBatch(batch), {
      lanes,
      maxBatch,
      retryAlone,
    });
    // Named statements are parsed and planned once per connection.
    const sql = this.sql;
    this.names = {
      release: statementName('release', sql.release),
      takeOver: statementName('take_over', sql.takeOver),
      settleUnknown: statementName('settle_unknown', sql.settleUnknown),
      peek: statementName('peek', sql.peek),
      flushCounters: statementName('flush_counters', sql.flushCounters),
    };
    this.channel = completionChannel(tableName);
    this.named = options.namedStatements ?? true;
    this.onNamedStatementsLost = options.onNamedStatementsLost;
  }

  /** False once statements are sent unnamed (configured so, or a named one did not survive). */
  get namedStatements(): boolean {
    return this.named;
  }

  /**
   * Sends one statement, named while named statements work. The first time one did not survive
   * between transactions (a transaction pooler), every later call goes unnamed, and this one is sent
   * again unnamed: it failed before it ran. Unnamed statements are parsed within the call's own
   * implicit transaction, so they work on any server connection.
   */
  private async sendStatement<R extends QueryResultRow | unknown[]>(
    query: Statement,
  ): Promise<QueryResult<R & QueryResultRow>> {
    const send = (config: QueryConfig): Promise<QueryResult<R & QueryResultRow>> =>
      this.pool.query<R & QueryResultRow>(config);
    if (!this.named) return send({ ...query, name: undefined });
    try {
      return await send(query);
    } catch (error) {
      if (!namedStatementLost(error)) throw error;
      if (this.named) {
        this.named = false;
        this.onNamedStatementsLost?.(error as Error);
      }
      return send({ ...query, name: undefined });
    }
  }

  /** Claims go through the natural batcher: alone when the store keeps up, together when not. */
  claim(request: ClaimRequest): Promise<ClaimResult> {
    return this.claims.submit({ request, token: randomUUID() });
  }

  /** How claims and completions were batched so far (statements vs calls carried). */
  batchStats(): { claims: BatcherStats; completions: BatcherStats } {
    return { claims: this.claims.stats(), completions: this.completions.stats() };
  }

  private async claimBatch(batch: readonly PendingClaim[]): Promise<ClaimResult[]> {
    // Sorted, so that concurrent batches (here or in other instances) lock rows in one order.
    // recordText order: one total order of (scope, tenant, key), the same in every instance.
    const sorted = batch
      .map((pending) => ({ pending, text: recordText(pending.request.id) }))
      .sort((a, b) => (a.text < b.text ? -1 : a.text > b.text ? 1 : 0))
      .map(({ pending }) => pending);
    const values: unknown[] = [];
    for (const { request, token } of sorted) {
      values.push(
        request.id.scope,
        request.id.tenant,
        request.id.key,
        request.route,
        request.fingerprint,
        token,
        Math.round(request.leaseMs),
        Math.round(Math.max(request.claimExpiryMs, request.leaseMs)),
      );
    }
    // Rows as arrays: pg builds no per-row object keyed by column name (it showed in profiles).
    const { rows } = await this.sendStatement<ClaimRowValues>({
      ...this.statement('claim', batch.length, claimStatement),
      values,
      rowMode: 'array',
    });
    const byId = new Map(
      rows.map((values) => {
        const row = claimRow(values);
        return [recordText(row), row];
      }),
    );
    return batch.map(({ request, token }) => {
      const row = byId.get(recordText(request.id));
      if (!row) throw new Error('claim returned no row for a key');
      return toClaimResult(row, token, request.fingerprint);
    });
  }

  /** Completions go through the natural batcher: alone when the store keeps up, together when not. */
  complete(id: RecordId, fence: string, response: StoredResponse, ttlMs: number): Promise<boolean> {
    return this.completions.submit({ id, fence, response, ttlMs });
  }

  private async completeBatch(batch: readonly Completion[]): Promise<boolean[]> {
    const statement = this.statement('complete', batch.length, completeStatement);
    const values: unknown[] = [this.channel];
    batch.forEach(({ id, fence, response, ttlMs }, n) => {
      values.push(
        n,
        id.scope,
        id.tenant,
        id.key,
        fence,
        response.status,
        JSON.stringify(response.headers),
        response.bodyOmitted ? null : response.body,
        response.bodyOmitted,
        response.outcomeUnknown,
        Math.round(ttlMs),
      );
    });
    const { rows } = await this.sendStatement<{ n: number }>({ ...statement, values });
    const changed = batch.map(() => false);
    for (const row of rows) changed[row.n] = true;
    return changed;
  }

  /** The named statement for a batch of this many rows, built once. */
  private statement(
    kind: 'claim' | 'complete',
    rows: number,
    build: (tableName: string, rows: number) => string,
  ): { name: string; text: string } {
    const cacheKey = `${kind}_${rows}`;
    let statement = this.statements.get(cacheKey);
    if (!statement) {
      const text = build(this.tableName, rows);
      statement = { name: statementName(cacheKey, text), text };
      this.statements.set(cacheKey, statement);
    }
    return statement;
  }

  async release(id: RecordId, fence: string): Promise<boolean> {
    const result = await this.sendStatement({
      name: this.names.release,
      text: this.sql.release,
      values: [id.scope, id.tenant, id.key, fence, this.channel, recordDigest(id)],
    });
    return (result.rows[0] as { changed: number } | undefined)?.changed === 1;
  }

  async flushCounters(deltas: readonly CounterDelta[]): Promise<void> {
    if (deltas.length === 0) return;
    await this.sendStatement({
      name: this.names.flushCounters,
      text: this.sql.flushCounters,
      values: [
        deltas.map((d) => d.id.scope),
        deltas.map((d) => d.id.tenant),
        deltas.map((d) => d.id.key),
        deltas.map((d) => d.attempts),
        deltas.map((d) => d.replays),
      ],
    });
  }

  async peek(id: RecordId, fingerprint: Buffer): Promise<PeekResult> {
    const { rows } = await this.sendStatement<PeekRow>({
      name: this.names.peek,
      text: this.sql.peek,
      values: [id.scope, id.tenant, id.key, fingerprint],
    });
    const row = rows[0];
    if (!row || row.expired) return { kind: 'absent' };
    if (!row.same_fingerprint) return { kind: 'mismatch' };
    if (row.state === 'completed') return { kind: 'completed' };
    return { kind: 'in-flight', leaseRemainingMs: row.lease_remaining_ms };
  }

  async takeOver(
    id: RecordId,
    fence: string,
    leaseMs: number,
    claimExpiryMs: number,
  ): Promise<string | null> {
    const { rows } = await this.sendStatement<{ fence: string }>({
      name: this.names.takeOver,
      text: this.sql.takeOver,
      values: [
        id.scope,
        id.tenant,
        id.key,
        fence,
        randomUUID(),
        Math.round(leaseMs),
        Math.round(Math.max(claimExpiryMs, leaseMs)),
      ],
    });
    return rows[0]?.fence ?? null;
  }

  async settleUnknown(
    id: RecordId,
    fence: string,
    response: StoredResponse,
    ttlMs: number,
  ): Promise<StoredResponse | null> {
    const { rows } = await this.sendStatement<ResponseRow>({
      name: this.names.settleUnknown,
      text: this.sql.settleUnknown,
      values: [
        id.scope,
        id.tenant,
        id.key,
        fence,
        response.status,
        JSON.stringify(response.headers),
        response.body,
        Math.round(ttlMs),
        this.channel,
        recordDigest(id),
      ],
    });
    const row = rows[0];
    return row ? toResponse(row) : null;
  }
}

interface PeekRow {
  state: string;
  same_fingerprint: boolean;
  expired: boolean;
  lease_remaining_ms: number;
}

/** The NOTIFY channel operator clears are announced on, so every replay cache evicts the record. */
export function evictionChannel(tableName: string): string {
  return `ip_evict_${tableName}`;
}

/** The NOTIFY channel that completions and releases of this table are announced on. */
export function completionChannel(tableName: string): string {
  return `ip_done_${tableName}`;
}

function toResponse(row: ResponseRow): StoredResponse {
  return {
    status: row.status,
    headers: (row.headers ?? []) as HeaderPairs,
    body: row.body ?? Buffer.alloc(0),
    bodyOmitted: row.body_omitted,
    outcomeUnknown: row.outcome_unknown,
  };
}

function toClaimResult(row: ClaimRow, token: string, fingerprint: Buffer): ClaimResult {
  const attempts = row.attempts;
  if (row.claim_token === token) return { kind: 'claimed', fence: row.fence, attempts };
  if (!row.fingerprint.equals(fingerprint)) return { kind: 'mismatch', attempts };
  if (row.state === 'completed') {
    return {
      kind: 'completed',
      response: toResponse(row as ResponseRow),
      expiresInMs: row.expires_in_ms,
      attempts,
    };
  }
  return {
    kind: 'in-flight',
    fence: row.fence,
    leaseRemainingMs: row.lease_remaining_ms,
    attempts,
  };
}
