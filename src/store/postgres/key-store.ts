// The PostgreSQL KeyStore: claims and completions batched naturally under load (natural-batcher.ts),
// each operation one named, parameterised statement (statements.ts, sent by statement-layout.ts;
// on Citus one shard's keys at a time: shard-routing.ts) whose rows rows.ts reads. The
// writes that must land — completions, releases, and the release of a claim whose reply was lost —
// are kept and sent again (pending-writes.ts: in memory, and on disk with a spool) when their
// statement fails. What this process holds for a key goes to the database before the key is
// claimed, taken over or settled again: an answer this process gave is never overtaken by an
// unknown outcome of its own making. An unknown outcome another request settled when the lease
// ended is provisional: the claim's own answer, landing later, replaces it (replaceUnknown).
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type { Pool } from 'pg';
import type {
  Claimant,
  ClaimRequest,
  CompleteResult,
  ClaimResult,
  CounterDelta,
  KeyStore,
  Landing,
  PeekResult,
  RecordId,
  StoredResponse,
} from '../record';
import { recordDigest, recordText } from '../record';
import { type BatcherStats, NaturalBatcher } from './natural-batcher';
import { SQLSTATE } from '../../db/sqlstate';
import {
  isRelayedConnectionFailure,
  isRetryableWriteError,
  mayHaveCommitted,
} from '../../db/write-failure';
import type { AttemptResult } from './write-outbox';
import {
  DEFAULT_OUTBOX,
  type OutboxSettings,
  type PendingWrite,
  PendingWrites,
  type WriteData,
  type WriteObserver,
} from './pending-writes';
import type { RecoveredEntry, Spool } from '../spool';
import { isDistributed } from '../../db/topology';
import {
  type BatchClaimRowValues,
  claimResultOf,
  type ClaimRowValues,
  type PeekRow,
  type ResponseRow,
  toResponse,
} from './rows';
import { completionChannel } from './statements';
import { inParts, ShardRouting } from './shard-routing';
import { type ArrayElement, columnLiterals } from './array-literal';
import { type Layout, layout, StatementSender } from './statement-layout';

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
  /** The bounds of the writes kept after a failed attempt (store.outbox), and what the caller waits. */
  readonly outbox?: Partial<OutboxSettings>;
  /** Told of every write sent again, and of every write leaving the outbox (metrics, logs). */
  readonly writes?: WriteObserver;
  /** Where writes past the hold are kept on disk (store.outbox.spool), opened by the caller. */
  readonly spool?: Spool;
}

/** A claim refused because answers already given wait for the store and the spool is full. */
export class AnswersUnkept extends Error {
  constructor() {
    super(
      'answers this proxy gave are waiting to be stored and its spool (store.outbox.spool) cannot take more: no new claim until PostgreSQL has them',
    );
    this.name = 'AnswersUnkept';
  }
}

/**
 * One claim statement and one completion statement at a time: what arrives meanwhile waits for the
 * next. Two of each measured worse at 64 connections (the bench, test/bench/README.md): twice the
 * statements for the same keys (0.21 against 0.10 per new key), and more CPU in both the proxy
 * (1.19×) and PostgreSQL (1.14×) per new key for less throughput; on Citus 0.31 against 0.20
 * statements. A lone call still runs at once.
 */
const DEFAULT_LANES = 1;
/**
 * How long after this process last saw PostgreSQL fail a lease that ended counts as ended in an
 * outage, and how long an unknown outcome then waits for the claim's holder to land its answer: the
 * holder's outbox sends again at least every second (write-outbox.ts), and sooner once it claims.
 */
const RECENT_OUTAGE_MS = 15_000;
const HOLDER_GRACE_MS = 2_500;
const HOLDER_POLL_MS = 100;
const DEFAULT_MAX_BATCH = 32;
/** How old the Citus shard map may get before a batch asks for a fresh one (shards split, moved). */

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

export class PostgresKeyStore implements KeyStore {
  private layout: Layout | undefined;
  private layoutLoading: Promise<Layout> | undefined;
  private readonly channel: string;
  /** Sends each statement, named while named statements survive (statement-layout.ts). */
  private readonly statements: StatementSender;

  private readonly claims: NaturalBatcher<PendingClaim, ClaimResult>;
  /** Each completion's new expiry (epoch ms), or null when its fence was stale. */
  private readonly completions: NaturalBatcher<Completion, number | null>;
  /** On Citus: which shard each key is on, so a batch is one shard's (shard-routing.ts). */
  private readonly shards: ShardRouting;
  /** The writes whose first attempt failed, until they land. */
  private readonly outbox: PendingWrites;
  private readonly onReplaced: WriteObserver['replacedUnknown'];
  /** When this process last saw PostgreSQL fail under it: a statement, or the LISTEN connection. */
  private outageSeenAt = -Infinity;

  constructor(
    private readonly pool: Pool,
    private readonly tableName: string,
    options: KeyStoreOptions = {},
  ) {
    this.shards = new ShardRouting(pool, tableName);
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
      // On Citus each statement carries one shard's keys: Citus routes it to that shard alone.
      groupOf: ({ request: { id } }) => this.shards.shardOf(id.key),
      retryAlone,
    });
    this.completions = new NaturalBatcher((batch) => this.completeBatch(batch), {
      lanes,
      maxBatch,
      groupOf: ({ id }) => this.shards.shardOf(id.key),
      retryAlone,
    });
    this.channel = completionChannel(tableName);
    this.statements = new StatementSender(
      pool,
      options.namedStatements ?? true,
      options.onNamedStatementsLost,
    );
    this.outbox = new PendingWrites((data, followUp) => this.sendAgain(data, followUp), {
      ...DEFAULT_OUTBOX,
      ...options.outbox,
      retryable: isRetryableWriteError,
      observer: options.writes,
      spool: options.spool,
    });
    this.onReplaced = options.writes?.replacedUnknown?.bind(options.writes);
    // Found out now, so that hardly a call waits for it (one that fails is tried again on use).
    if (!this.layout) this.loadLayout().catch(() => undefined);
    else if (this.layout.distributed) void this.shards.load();
  }

  /**
   * The statements for this table: known from the options, or found out once, by the first call
   * (one query; a failed one is tried again by the next call).
   */
  private loadLayout(): Promise<Layout> {
    this.layoutLoading ??= isDistributed(this.pool, this.tableName).then(
      async (distributed) => {
        if (distributed) await this.shards.load();
        return (this.layout = layout(this.tableName, distributed));
      },
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
    return this.statements.named;
  }

  /**
   * Claims go through the natural batcher: alone when the store keeps up, together when not. On a
   * Citus distributed table a batch holds the keys of one shard only (groupOf), which Citus routes
   * to that shard: a statement over keys on several shards would be a distributed transaction, with
   * a two-phase commit on every worker it touches. Likewise completions.
   */
  async claim(request: ClaimRequest): Promise<ClaimResult> {
    // The token is made before the statement is sent: if its reply is lost, this is what the row
    // carries if the claim committed, and what releases it.
    const token = randomUUID();
    if (this.outbox.size > 0) {
      // An answer this process could not keep waits for the store: take on no new one meanwhile.
      if (this.outbox.refusingClaims) throw new AnswersUnkept();
      // What this process still holds for the key lands first: the claim then sees the answer.
      await this.sendPendingOf(request.id);
    }
    try {
      const result = await this.claims.submit({ request, token });
      // PostgreSQL answers again: queued writes need not wait out their backoff.
      if (this.outbox.size > 0) this.outbox.wake();
      return result;
    } catch (first) {
      let error = first;
      // A Citus coordinator lost its cached connection to a worker (a worker restarted, its
      // session was ended): the next statement gets a fresh one, so the claim is sent once more
      // at once rather than answered 503. Safe with the same token: had the first attempt
      // committed, the row carries this token and the claim comes back as ours. Here, not on
      // every claim's promise: the common path pays nothing for it.
      if (isRelayedConnectionFailure(first)) {
        try {
          return await this.claims.submit({ request, token });
        } catch (again) {
          error = again;
        }
      }
      if (mayHaveCommitted(first) || mayHaveCommitted(error)) this.releaseLostClaim(request, token);
      if (isRetryableWriteError(error)) this.noteOutage();
      throw error;
    }
  }

  /**
   * Sends what the outbox holds for a record now. A failure that may pass is the caller's (503: the
   * key cannot be answered before what this process holds for it has landed).
   */
  private async sendPendingOf(id: RecordId): Promise<boolean> {
    const key = recordText(id);
    if (!this.outbox.holds(key)) return false;
    await this.outbox.sendNow(key);
    return true;
  }

  /**
   * A claim whose statement may have committed, though its caller answers that nothing was
   * forwarded (503): released by its token in the background, so that its key is never left in
   * progress to end as an unknown outcome. A claim that never committed leaves no row with the
   * token: the release finds nothing and is done.
   */
  private releaseLostClaim(request: ClaimRequest, token: string): void {
    this.outbox.later(
      { kind: 'release_claim', id: request.id, fence: token },
      performance.now() + Math.max(request.claimExpiryMs, request.leaseMs),
    );
  }

  /** Puts back the writes a spool kept from an earlier run (see PendingWrites.recover). */
  recoverSpooled(entries: readonly RecoveredEntry[]): number {
    return this.outbox.recover(entries);
  }

  /** Writes kept after a failed attempt, not yet landed. */
  get pendingWrites(): { readonly writes: number; readonly bytes: number } {
    return this.outbox.pending;
  }

  /**
   * Sends what the outbox holds until it has landed or `timeoutMs` has passed (shutdown); returns
   * what could not be landed: kept in the spool for the next start, or lost. No write is taken
   * afterwards.
   */
  drainWrites(timeoutMs: number): Promise<{ kept: PendingWrite[]; lost: PendingWrite[] }> {
    return this.outbox.drain(timeoutMs);
  }

  /** How claims and completions were batched so far (statements vs calls carried). */
  batchStats(): { claims: BatcherStats; completions: BatcherStats } {
    return { claims: this.claims.stats(), completions: this.completions.stats() };
  }

  private async claimBatch(batch: readonly PendingClaim[]): Promise<ClaimResult[]> {
    const { distributed, sql, names, rows: byRows } = this.layout ?? (await this.loadLayout());
    if (batch.length === 1) {
      // A lone claim (the store keeps up): its one row, nothing to sort or match.
      const pending = batch[0]!;
      const { fingerprint } = pending.request;
      const { rows } = await this.statements.send<ClaimRowValues>({
        name: names.claimOne,
        text: sql.claimOne,
        values: claimValues(pending),
        rowMode: 'array',
      });
      const values = rows[0];
      if (!values) throw new Error('claim returned no row for a key');
      return [claimResultOf(values, pending.token, fingerprint)];
    }
    // Grouped by the map known when the batch formed: split again if it spans shards now.
    if (distributed) {
      const split = this.shards.split(batch, ({ request }) => request.id.key);
      if (split) return inParts(batch, split, (part) => this.claimBatch(part));
    }
    // Sorted, so that concurrent batches (here or in other instances) lock rows in one order.
    // recordText order: one total order of (scope, tenant, key), the same in every instance.
    const texts = batch.map((pending) => recordText(pending.request.id));
    const sorted = batch
      .map((_, index) => index)
      .sort((a, b) => (texts[a]! < texts[b]! ? -1 : texts[a]! > texts[b]! ? 1 : 0))
      .map((index) => batch[index]!);
    const { name, text } = distributed
      ? byRows.claim(sorted.length)
      : { name: names.claimBatch, text: sql.claimBatch };
    // Rows as arrays: pg builds no per-row object keyed by column name (it showed in profiles).
    const { rows } = await this.statements.send<BatchClaimRowValues>({
      name,
      text,
      values: distributed ? sorted.flatMap(claimValues) : columnsOf(sorted, claimValues),
      rowMode: 'array',
    });
    const byId = new Map(
      rows.map((values) => {
        const [scope, tenant, key] = values.slice(-3) as [string, string, string];
        return [recordText({ scope, tenant, key }), values] as const;
      }),
    );
    return batch.map(({ request, token }, index) => {
      const values = byId.get(texts[index]!);
      if (!values) throw new Error('claim returned no row for a key');
      return claimResultOf(values, token, request.fingerprint);
    });
  }

  /**
   * Completions go through the natural batcher: alone when the store keeps up, together when not.
   * One whose statement failed (a whole batch fails together: each of its completions comes here
   * alone) goes to the outbox, sent again on its own statement until it lands; the caller waits
   * up to holdMs for that, then learns `queued`. Its `followUp` goes with it: made after each
   * attempt that lands, so the record ends as a completion stored at once would (a follow-up that
   * fails is sent again with the completion, which then finds itself stored).
   */
  async complete(
    id: RecordId,
    fence: string,
    response: StoredResponse,
    ttlMs: number,
    _claimant?: Claimant,
    followUp?: () => Promise<unknown>,
  ): Promise<CompleteResult> {
    const completion: Completion = { id, fence, response, ttlMs };
    try {
      // The rare completion with a broken stream's partial answer goes alone, on its own statement.
      const expiresAt =
        (response.partial === undefined
          ? await this.completions.submit(completion)
          : (await this.completeBatch([completion]))[0]!) ??
        (await this.replaceUnknown(completion));
      return expiresAt === null ? { landing: 'stale' } : { landing: 'stored', expiresAt };
    } catch (error) {
      if (!isRetryableWriteError(error)) throw error;
      this.noteOutage();
      // An in-progress row lives at least ttl past its lease; after that a completion is moot.
      const landing = await this.outbox.hold(
        error,
        { kind: 'complete', id, fence, response, ttlMs },
        performance.now() + ttlMs,
        followUp,
      );
      return { landing };
    }
  }

  /** A write whose first attempt failed, sent once more (by the outbox). */
  private async sendAgain(
    data: WriteData,
    followUp?: () => Promise<unknown>,
  ): Promise<AttemptResult> {
    if (data.kind !== 'complete')
      return (await this.releaseOnce(data.id, data.fence)) ? 'landed' : 'stale';
    const result = await this.completeAgain(data);
    if (result === 'landed') await followUp?.();
    return result;
  }

  /**
   * A completion sent again: it may have been stored by an attempt whose reply was lost, which
   * leaves the row completed with this token and answer, so a sent-again UPDATE changes nothing.
   */
  private async completeAgain(completion: Completion): Promise<AttemptResult> {
    const [expiresAt] = await this.completeBatch([completion]);
    if (expiresAt != null || (await this.replaceUnknown(completion)) !== null) return 'landed';
    const { sql, names } = this.layout ?? (await this.loadLayout());
    const { id, fence, response } = completion;
    const { rows } = await this.statements.send({
      name: names.completedWith,
      text: sql.completedWith,
      values: [id.scope, id.tenant, id.key, fence, response.status, response.outcomeUnknown],
    });
    return rows.length > 0 ? 'landed' : 'stale';
  }

  /**
   * A completion that found its claim no longer in progress: when another request settled it as an
   * unknown outcome because the lease ended, the answer replaces that (the upstream ran once, and
   * this is what it answered). Returns the record's expiry, or null when there was nothing to
   * replace. An unknown outcome of its own replaces nothing: it would say no more than the one there.
   */
  private async replaceUnknown(completion: Completion): Promise<number | null> {
    const { id, response } = completion;
    if (response.outcomeUnknown) return null;
    const { sql, names } = this.layout ?? (await this.loadLayout());
    const { rows } = await this.statements.send<{ expires_at_ms: number }>({
      name: names.replaceUnknown,
      text: sql.replaceUnknown,
      values: completionValues(completion),
    });
    const row = rows[0];
    if (row === undefined) return null;
    this.onReplaced?.(id, response.status);
    return row.expires_at_ms;
  }

  private async completeBatch(batch: readonly Completion[]): Promise<(number | null)[]> {
    const { distributed, sql, names, rows: byRows } = this.layout ?? (await this.loadLayout());
    if (distributed && batch.length > 1) {
      const split = this.shards.split(batch, ({ id }) => id.key);
      if (split) return inParts(batch, split, (part) => this.completeBatch(part));
    }
    const one = batch.length === 1;
    const { name, text } = one
      ? batch[0]!.response.partial === undefined
        ? { name: names.completeOne, text: sql.completeOne }
        : { name: names.completePartial, text: sql.completePartial }
      : distributed
        ? byRows.complete(batch.length)
        : { name: names.completeBatch, text: sql.completeBatch };
    // A lone completion's values as they are; a batch's one row after another on Citus (its
    // statement has a VALUES row per completion), else one array per column (for unnest).
    const values = one
      ? completionValues(batch[0]!)
      : distributed
        ? batch.flatMap(completionValues)
        : columnsOf(batch, completionValues);
    // Rows as arrays [n, expires_at_ms, nudged]; on Citus [n, scope, tenant, key, attempts,
    // expires_at_ms] (statements.ts).
    const { rows } = await this.statements.send<[n: number, ...rest: unknown[]]>({
      name,
      text,
      // On PostgreSQL $1 is the NOTIFY channel.
      values: distributed ? values : [this.channel, ...values],
      rowMode: 'array',
    });
    const changed = batch.map((): number | null => null);
    for (const row of rows) changed[row[0] - 1] = (distributed ? row[5] : row[1]) as number;
    if (distributed) {
      await this.nudgeWaiters(
        rows.filter((row) => (row[4] as number) > 1).map((row) => batch[row[0] - 1]!.id),
      );
    }
    return changed;
  }

  /**
   * Releases a claim whose forward reached nobody, so that a retry runs it. One whose statement
   * failed goes to the outbox like a completion (a release is idempotent: one sent again after a
   * lost reply finds no row with the token, and is done).
   */
  async release(id: RecordId, fence: string): Promise<Landing> {
    try {
      return (await this.releaseOnce(id, fence)) ? 'stored' : 'stale';
    } catch (error) {
      if (!isRetryableWriteError(error)) throw error;
      this.noteOutage();
      // Bounded by count: a release never does harm, however late (a row claimed anew carries
      // another token).
      return this.outbox.hold(error, { kind: 'release', id, fence }, Infinity);
    }
  }

  /** The release statement, once: true when it deleted the claim carrying `fence`. */
  private async releaseOnce(id: RecordId, fence: string): Promise<boolean> {
    const { distributed, sql, names } = this.layout ?? (await this.loadLayout());
    const values = [id.scope, id.tenant, id.key, fence];
    const { rows } = await this.statements.send<{ attempts: number }>({
      name: names.release,
      text: sql.release,
      values: distributed ? values : [...values, this.channel, recordDigest(id)],
    });
    const row = rows[0];
    if (distributed && row && row.attempts > 1) await this.nudgeWaiters([id]);
    return row !== undefined;
  }

  /**
   * Waits up to HOLDER_GRACE_MS for the claim with `fence` to leave its record in progress (its
   * holder's answer landed, or it was released); true when it did.
   */
  private async holderLanded(id: RecordId, fence: string): Promise<boolean> {
    const { sql, names } = this.layout ?? (await this.loadLayout());
    const deadline = performance.now() + HOLDER_GRACE_MS;
    for (;;) {
      const { rows } = await this.statements.send({
        name: names.stillClaimed,
        text: sql.stillClaimed,
        values: [id.scope, id.tenant, id.key, fence],
      });
      if (rows.length === 0) return true;
      if (performance.now() >= deadline) return false;
      await new Promise((resolve) => setTimeout(resolve, HOLDER_POLL_MS));
    }
  }

  /**
   * PostgreSQL failed under this process (a statement, or the LISTEN connection: compose.ts):
   * an unknown outcome settled soon after gives the claim's holder a moment first (settleUnknown).
   */
  noteOutage(): void {
    this.outageSeenAt = performance.now();
  }

  async flushCounters(deltas: readonly CounterDelta[]): Promise<void> {
    if (deltas.length === 0) return;
    const { distributed, sql, names } = this.layout ?? (await this.loadLayout());
    if (distributed && deltas.length > 1) {
      const split = this.shards.split(deltas, ({ id }) => id.key);
      if (split) {
        await Promise.all(split.map((part) => this.flushCounters(part.map((i) => deltas[i]!))));
        return;
      }
    }
    await this.statements.send({
      name: names.flushCounters,
      text: sql.flushCounters,
      values: columnsOf(deltas, (d) => [d.id.scope, d.id.tenant, d.id.key, d.attempts, d.replays]),
    });
  }

  async peek(id: RecordId, fingerprint: Buffer): Promise<PeekResult> {
    const { sql, names } = this.layout ?? (await this.loadLayout());
    const { rows } = await this.statements.send<PeekRow>({
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
    // What this process holds for the key lands instead: the caller claims again and finds it.
    if (this.outbox.size > 0 && (await this.sendPendingOf(id))) return null;
    const { sql, names } = this.layout ?? (await this.loadLayout());
    const { rows } = await this.statements.send<{ fence: string }>({
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
    // Never an unknown outcome over an answer this process gave: that lands instead (see takeOver).
    if (this.outbox.size > 0 && (await this.sendPendingOf(id))) return null;
    // Right after an outage the holder, elsewhere, may have the answer queued: it gets a moment.
    if (
      performance.now() - this.outageSeenAt < RECENT_OUTAGE_MS &&
      (await this.holderLanded(id, fence))
    )
      return null;
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
    const { rows } = await this.statements.send<ResponseRow & { attempts: number }>({
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
function claimValues({ request, token }: PendingClaim): ArrayElement[] {
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
function completionValues({ id, fence, response, ttlMs }: Completion): ArrayElement[] {
  const values: ArrayElement[] = [
    id.scope,
    id.tenant,
    id.key,
    fence,
    response.status,
    JSON.stringify(response.headers),
    response.bodyOmitted ? null : response.body,
    response.bodyOmitted,
    response.outcomeUnknown,
  ];
  const partial = response.partial;
  if (partial !== undefined) {
    const { status, headers, bytes } = partial;
    values.push(JSON.stringify({ status, headers, bytes }), partial.body);
  }
  values.push(Math.round(ttlMs));
  return values;
}

/** A batch's values as one array literal per column (for unnest). */
function columnsOf<T>(batch: readonly T[], valuesOf: (item: T) => ArrayElement[]): string[] {
  return columnLiterals(batch.map(valuesOf));
}
