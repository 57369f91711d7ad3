// The PostgreSQL KeyStore: claims and completions batched naturally under load (natural-batcher.ts),
// each operation one named, parameterised statement (statements.ts) whose rows rows.ts reads.
import { createHash, randomUUID } from 'node:crypto';
import type { Pool, QueryConfig, QueryResult, QueryResultRow } from 'pg';
import type {
  ClaimRequest,
  ClaimResult,
  CounterDelta,
  KeyStore,
  PeekResult,
  RecordId,
  StoredResponse,
} from '../record';
import { recordDigest, recordText } from '../record';
import { type BatcherStats, NaturalBatcher } from './natural-batcher';
import { SQLSTATE } from '../../db/sqlstate';
import { isDistributed } from '../../db/topology';
import {
  claimRow,
  type ClaimRowValues,
  type PeekRow,
  type ResponseRow,
  toClaimResult,
  toResponse,
} from './rows';
import { buildStatements, completionChannel } from './statements';

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
      claimOne: statementName('claim', sql.claimOne),
      claimBatch: statementName('claim_batch', sql.claimBatch),
      completeOne: statementName('complete', sql.completeOne),
      completeBatch: statementName('complete_batch', sql.completeBatch),
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
   * fails loses nothing but time: waiters also poll (coalescing-store.ts).
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
    const { distributed, sql, names } = this.layout ?? (await this.loadLayout());
    // Batched only while the layout was unknown: on Citus each goes alone.
    if (distributed && batch.length > 1)
      return (await Promise.all(batch.map((pending) => this.claimBatch([pending])))).flat();
    // Sorted, so that concurrent batches (here or in other instances) lock rows in one order.
    // recordText order: one total order of (scope, tenant, key), the same in every instance.
    const sorted = batch
      .map((pending) => ({ pending, text: recordText(pending.request.id) }))
      .sort((a, b) => (a.text < b.text ? -1 : a.text > b.text ? 1 : 0))
      .map(({ pending }) => pending);
    const one = batch.length === 1;
    // Rows as arrays: pg builds no per-row object keyed by column name (it showed in profiles).
    const { rows } = await this.sendStatement<ClaimRowValues>({
      name: one ? names.claimOne : names.claimBatch,
      text: one ? sql.claimOne : sql.claimBatch,
      values: statementValues(sorted, claimValues),
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
    const { distributed, sql, names } = this.layout ?? (await this.loadLayout());
    if (distributed && batch.length > 1)
      return (await Promise.all(batch.map((one) => this.completeBatch([one])))).flat();
    const one = batch.length === 1;
    const values = statementValues(batch, completionValues);
    const { rows } = await this.sendStatement<{ n: number; attempts: number }>({
      name: one ? names.completeOne : names.completeBatch,
      text: one ? sql.completeOne : sql.completeBatch,
      values: distributed ? values : [this.channel, ...values],
    });
    const changed = batch.map(() => false);
    for (const row of rows) changed[row.n - 1] = true;
    if (distributed) {
      await this.nudgeWaiters(
        rows.filter((row) => row.attempts > 1).map((row) => batch[row.n - 1]!.id),
      );
    }
    return changed;
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

/** One claim's values, in the order of statements.ts's claim input columns. */
function claimValues({ request, token }: PendingClaim): unknown[] {
  return [
    request.id.scope,
    request.id.tenant,
    request.id.key,
    request.route,
    request.fingerprint,
    token,
    Math.round(request.leaseMs),
    Math.round(Math.max(request.claimExpiryMs, request.leaseMs)),
  ];
}

/** One completion's values, in the order of statements.ts's completion input columns. */
function completionValues({ id, fence, response, ttlMs }: Completion): unknown[] {
  return [
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
  ];
}

/** A lone call's values as they are; a batch's as one array per column (for unnest). */
function statementValues<T>(batch: readonly T[], valuesOf: (item: T) => unknown[]): unknown[] {
  if (batch.length === 1) return valuesOf(batch[0]!);
  const rows = batch.map(valuesOf);
  return rows[0]!.map((_, column) => rows.map((row) => row[column]));
}
