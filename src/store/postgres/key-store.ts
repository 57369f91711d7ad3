// The Postgres KeyStore: one named, parameterised statement per operation. Time comes from Postgres
// (now(), intervals), never from this process's clock, so instances with skewed clocks agree.
//
// The same statements run on a Citus distributed table (SPEC §10), which asks three things of them:
// no function that is not IMMUTABLE in RETURNING (Citus runs RETURNING on the shard), no STABLE
// function (now(), jsonb_build_object) called with a column of the row (Citus evaluates those once on
// the coordinator, before it routes the statement), and no NOTIFY inside a statement Citus sends to a
// worker (the LISTENing sessions are on the coordinator). So "now" reaches RETURNING as last_seen_at,
// which each claim sets to now(); deadlines are computed from parameters alone; and on Citus the
// nudge to waiters is a statement of its own, on the coordinator (nudgeWaiters).
import { createHash, randomUUID } from 'node:crypto';
import type { Pool, QueryConfig, QueryResult, QueryResultRow } from 'pg';
import type {
  ClaimRequest,
  ClaimResult,
  CounterDelta,
  HeaderPairs,
  KeyStore,
  PeekResult,
  RecordId,
  StoredResponse,
} from '../idempotency/record';
import { recordDigest, recordText } from '../idempotency/record';
import { quoteTableName } from './identifier';
import { type BatcherStats, NaturalBatcher } from './natural-batcher';
import { SQLSTATE } from './sqlstate';
import { isDistributed } from './topology';

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

/**
 * A one-element jsonb array for the record's history (migration 2). The fence, a column expression,
 * is put in with jsonb_set and casts, which are IMMUTABLE; jsonb_build_* are STABLE, so on Citus they
 * may only see parameters and now() (see the top of this file).
 */
function event(name: string, fence: string, status?: string): string {
  const statusPart = status ? `, 'status', ${status}` : '';
  const built = `jsonb_build_array(jsonb_build_object('event', ${name}, 'at', now()${statusPart}))`;
  return `jsonb_set(${built}, '{0,fence}', (${fence})::text::jsonb)`;
}

/**
 * A write that announces the records it changed to their waiters (onConcurrent: wait) with NOTIFY,
 * but only records another request has seen while they ran (attempts > 1): the common path pays
 * nothing for it. `write` returns its changed rows with their `attempts`; the statement returns
 * them too. `notify` is pg_notify's arguments, over `done`'s columns or parameters. On a Citus
 * distributed table (`notify` undefined) the write goes alone: Citus would send the NOTIFY to the
 * worker along with it, and the store nudges from the coordinator instead (nudgeWaiters).
 */
function withNudge(write: string, notify: string | undefined): string {
  if (notify === undefined) return write;
  return `
      WITH done AS (${write}
      ), nudge AS (SELECT pg_notify(${notify}) FROM done WHERE attempts > 1)
      SELECT done.*, (SELECT count(*) FROM nudge)::int AS nudged FROM done`;
}

/**
 * Column assignments of the claim's ON CONFLICT branch: an expired row is claimed afresh. "Now" is
 * excluded.last_seen_at, the now() of the claim's own VALUES row: Citus allows only IMMUTABLE
 * functions in DO UPDATE SET.
 */
function claimUpsertAssignments(): string {
  const expired = 'r.expires_at <= excluded.last_seen_at';
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
    created_at: ['excluded.created_at', 'r.created_at'],
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
    'last_seen_at = excluded.last_seen_at',
  );
  return assignments.join(',\n        ');
}

/** Parameters per completion in the complete statement; on PostgreSQL, $1 is the NOTIFY channel. */
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
 * VALUES row each with its own fence check; the new expiry is computed in the row, from its
 * parameter. Nudges waiters (withNudge). Returns the ordinals of the rows it changed.
 */
export function completeStatement(tableName: string, rows: number, distributed = false): string {
  const t = quoteTableName(tableName);
  // n, scope, tenant, key, fence, status, headers, body, body_omitted, outcome_unknown; then ttl_ms.
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
  ];
  const values: string[] = [];
  for (let row = 0; row < rows; row++) {
    const first = (distributed ? 1 : 2) + row * COMPLETE_ROW_PARAMS;
    const params = types.map((type, k) => `$${first + k}::${type}`);
    values.push(`(${params.join(', ')}, now() + ${ms(`$${first + types.length}`)})`);
  }
  const update = `
        UPDATE ${t} AS r SET state = 'completed', status = i.status, headers = i.headers, body = i.body,
               body_omitted = i.body_omitted, outcome_unknown = i.outcome_unknown, completed_at = now(),
               lease_expires_at = NULL, expires_at = i.expires_at,
               prune_after = GREATEST(r.prune_after, i.expires_at)
        FROM (VALUES ${values.join(',\n               ')})
          AS i(n, scope, tenant, key, fence, status, headers, body, body_omitted, outcome_unknown, expires_at)
        WHERE r.scope = i.scope AND r.tenant = i.tenant AND r.key = i.key AND r.fence = i.fence
          AND r.state = 'in_progress'
        RETURNING i.n, r.scope, r.tenant, r.key, r.attempts`;
  const notify = `$1::text, ${recordDigestSql('scope', 'tenant', 'key')}`;
  return withNudge(update, distributed ? undefined : notify);
}

/** Parameters per claim in the claim statement. */
const CLAIM_ROW_PARAMS = 8;

/**
 * Claim-or-read, for one or several requests in one statement (natural batching): a VALUES row each,
 * distinct keys, sorted so that concurrent batches lock rows in one order. A new row, or an expired
 * one, is claimed (its claim_token is the request's); any other row is returned as it stands, with
 * the audit counters bumped. Rows come back keyed by (scope, tenant, key); the request compares the
 * token and fingerprint itself. Both branches set last_seen_at to the row's now(): RETURNING measures
 * the lease and the expiry from it, not from now() itself (see the top of this file).
 */
export function claimStatement(tableName: string, rows: number): string {
  const values: string[] = [];
  for (let row = 0; row < rows; row++) {
    const p = (k: number): string => `$${1 + row * CLAIM_ROW_PARAMS + k}`;
    values.push(
      `(${p(0)}::text, ${p(1)}::text, ${p(2)}::text, ${p(3)}::text, ${p(4)}::bytea, 'in_progress', ` +
        `${p(5)}::uuid, 1, now() + ${ms(p(6))}, now() + ${ms(p(7))}, now() + ${ms(p(7))}, now(), now())`,
    );
  }
  return `
      INSERT INTO ${quoteTableName(tableName)} AS r (scope, tenant, key, route, fingerprint, state,
                             claim_token, fence, lease_expires_at, expires_at, prune_after,
                             created_at, last_seen_at)
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
        GREATEST(0, ceil(extract(epoch FROM (r.lease_expires_at - r.last_seen_at)) * 1000))::int
          AS lease_remaining_ms,
        floor(extract(epoch FROM (r.expires_at - r.last_seen_at)) * 1000)::bigint::float8
          AS expires_in_ms`;
}

/**
 * The single-record statements. On a Citus distributed table (`distributed`) release and
 * settleUnknown take no NOTIFY parameters (withNudge).
 */
export function buildStatements(tableName: string, distributed = false) {
  const t = quoteTableName(tableName);
  const where = 'scope = $1::text AND tenant = $2::text AND key = $3::text';
  const notify = (channel: string, payload: string): string | undefined =>
    distributed ? undefined : `${channel}::text, ${payload}::text`;
  return {
    // Release, like completion (completeStatement), nudges waiters.
    release: withNudge(
      `
        DELETE FROM ${t} WHERE ${where} AND fence = $4::bigint AND state = 'in_progress'
        RETURNING attempts`,
      notify('$5', '$6'),
    ),
    takeOver: `
      UPDATE ${t} SET claim_token = $5::uuid, fence = fence + 1, lease_expires_at = now() + ${ms('$6')},
             expires_at = GREATEST(expires_at, now() + ${ms('$7')}),
             prune_after = GREATEST(prune_after, now() + ${ms('$7')}),
             events = events || ${event("'taken_over'", 'fence + 1')}
      WHERE ${where} AND fence = $4::bigint AND state = 'in_progress' AND lease_expires_at <= now()
      RETURNING fence::text AS fence`,
    settleUnknown: withNudge(
      `
        UPDATE ${t} SET state = 'completed', status = $5::smallint, headers = $6::jsonb, body = $7::bytea,
               body_omitted = false, outcome_unknown = true, completed_at = now(),
               lease_expires_at = NULL, expires_at = now() + ${ms('$8')},
               prune_after = GREATEST(prune_after, now() + ${ms('$8')}), replays = replays + 1,
               events = events || ${event("'settled_unknown'", 'fence', '$5::smallint')}
        WHERE ${where} AND fence = $4::bigint AND state = 'in_progress' AND lease_expires_at <= now()
        RETURNING status, headers, body, body_omitted, outcome_unknown, attempts`,
      notify('$9', '$10'),
    ),
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
  /**
   * Whether the table is a Citus distributed table (topology.ts); unset, the store finds out itself
   * (one query, sent when it is made).
   */
  readonly distributed?: boolean;
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

/** The statements for where the table lives, and their names. */
interface Layout {
  readonly distributed: boolean;
  readonly sql: Statements;
  readonly names: Record<keyof Statements, string>;
}

function layout(tableName: string, distributed: boolean): Layout {
  // Named statements are parsed and planned once per connection.
  const sql = buildStatements(tableName, distributed);
  return {
    distributed,
    sql,
    names: {
      release: statementName('release', sql.release),
      takeOver: statementName('take_over', sql.takeOver),
      settleUnknown: statementName('settle_unknown', sql.settleUnknown),
      peek: statementName('peek', sql.peek),
      flushCounters: statementName('flush_counters', sql.flushCounters),
    },
  };
}

/** One call of a named statement (rowMode: 'array' returns rows as arrays). */
type Statement = QueryConfig & { name: string; rowMode?: 'array' };

export class PostgresKeyStore implements KeyStore {
  private layout: Layout | undefined;
  private layoutLoading: Promise<Layout> | undefined;
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
    if (options.distributed !== undefined) this.layout = layout(tableName, options.distributed);
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
    this.channel = completionChannel(tableName);
    this.named = options.namedStatements ?? true;
    this.onNamedStatementsLost = options.onNamedStatementsLost;
    // Found out now, so that hardly a call waits for it (one that fails is tried again on use).
    if (!this.layout) this.loadLayout().catch(() => undefined);
  }

  /**
   * The statements for this table: known from the options, or found out once, by the first call
   * (one query; a failed one is tried again by the next call).
   */
  private loadLayout(): Promise<Layout> {
    this.layoutLoading ??= isDistributed(this.pool, this.tableName).then(
      (distributed) => (this.layout = layout(this.tableName, distributed)),
      (error: unknown) => {
        this.layoutLoading = undefined;
        throw error;
      },
    );
    return this.layoutLoading;
  }

  /**
   * On a Citus distributed table the statements do not NOTIFY (withNudge): this announces the
   * changed records that had waiters, from the coordinator, once they are committed. A nudge that
   * fails loses nothing but time: waiters also poll (wait-for-change.ts).
   */
  private async nudgeWaiters(ids: readonly RecordId[]): Promise<void> {
    if (ids.length === 0) return;
    await this.pool
      .query('SELECT pg_notify($1::text, d) FROM unnest($2::text[]) AS d', [
        this.channel,
        ids.map(recordDigest),
      ])
      .catch(() => undefined);
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

  /**
   * Claims go through the natural batcher: alone when the store keeps up, together when not. On a
   * Citus distributed table each claim is a statement of its own, which Citus routes to the one
   * shard of its key: a statement over keys on several shards is a distributed transaction with a
   * two-phase commit on every worker it touches, and measured slower than the same claims sent side
   * by side (the pool bounds how many at once). Likewise completions.
   */
  claim(request: ClaimRequest): Promise<ClaimResult> {
    const pending = { request, token: randomUUID() };
    if (this.layout?.distributed) return this.claimBatch([pending]).then(([result]) => result!);
    return this.claims.submit(pending);
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
    const completion = { id, fence, response, ttlMs };
    if (this.layout?.distributed) return this.completeBatch([completion]).then(([done]) => done!);
    return this.completions.submit(completion);
  }

  private async completeBatch(batch: readonly Completion[]): Promise<boolean[]> {
    const { distributed } = this.layout ?? (await this.loadLayout());
    const statement = this.statement('complete', batch.length, (table, rows) =>
      completeStatement(table, rows, distributed),
    );
    const values: unknown[] = distributed ? [] : [this.channel];
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
    const { rows } = await this.sendStatement<{ n: number; attempts: number }>({
      ...statement,
      values,
    });
    const changed = batch.map(() => false);
    for (const row of rows) changed[row.n] = true;
    if (distributed) {
      await this.nudgeWaiters(
        rows.filter((row) => row.attempts > 1).map((row) => batch[row.n]!.id),
      );
    }
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
    const { distributed, sql, names } = this.layout ?? (await this.loadLayout());
    const values = [id.scope, id.tenant, id.key, fence];
    const { rows } = await this.sendStatement<{ attempts: number }>({
      name: names.release,
      text: sql.release,
      values: distributed ? values : [...values, this.channel, recordDigest(id)],
    });
    const row = rows[0];
    if (distributed && row && row.attempts > 1) await this.nudgeWaiters([id]);
    return row !== undefined;
  }

  async flushCounters(deltas: readonly CounterDelta[]): Promise<void> {
    if (deltas.length === 0) return;
    const { sql, names } = this.layout ?? (await this.loadLayout());
    await this.sendStatement({
      name: names.flushCounters,
      text: sql.flushCounters,
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
    const { sql, names } = this.layout ?? (await this.loadLayout());
    const { rows } = await this.sendStatement<PeekRow>({
      name: names.peek,
      text: sql.peek,
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
    const { sql, names } = this.layout ?? (await this.loadLayout());
    const { rows } = await this.sendStatement<{ fence: string }>({
      name: names.takeOver,
      text: sql.takeOver,
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
    const { distributed, sql, names } = this.layout ?? (await this.loadLayout());
    const values = [
      id.scope,
      id.tenant,
      id.key,
      fence,
      response.status,
      JSON.stringify(response.headers),
      response.body,
      Math.round(ttlMs),
    ];
    const { rows } = await this.sendStatement<ResponseRow & { attempts: number }>({
      name: names.settleUnknown,
      text: sql.settleUnknown,
      values: distributed ? values : [...values, this.channel, recordDigest(id)],
    });
    const row = rows[0];
    if (distributed && row && row.attempts > 1) await this.nudgeWaiters([id]);
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
