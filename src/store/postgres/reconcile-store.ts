// The records a reconcile probe works on (docs/reconcile.md): an unknown outcome keeps what a probe
// needs (migration 5), a probe is taken by moving probe_after ahead under a probe_token, and what the
// probe found is written only by the holder of that token — so two instances, or a retry and the
// sweeper, never probe one record in one period, and a late probe never overwrites a newer answer.
//
//   unknown ─ keep ─► due at created_at + after ─ take (token, probe_after += hold·2^probes) ─► probe
//       found ─► completed with the answer (outcome_unknown false), replayed; caches evicted
//       not found ─► deleted: the next request with the key runs; caches evicted
//       anything else ─► left as it is: due again at probe_after
//   past giveUpAfter ─ give up (a 'gave_up' event, once) ─► never probed again; an operator's now
//
// Every statement also runs on a Citus distributed table (sql-time.ts says what Citus asks of time
// arithmetic): a column stands alone on its side of each comparison with now(), RETURNING measures
// from the `clock` row (now(), as a row the statement joins), and a probe token is an md5 of a seed
// this process drew and the record's key, not of random(). Only the sweep's pick differs: Citus
// cannot lock rows FOR UPDATE across shards, so there it picks without locking and the UPDATE
// checks again that each record is still due (one sweeper at a time holds the advisory lock; a
// retry's own take is the only other writer, and the re-check lets just one of them have it).
import type { Pool } from 'pg';
import { randomUUID } from 'node:crypto';
import { quoteTableName } from '../../db/identifier';
import { isDistributed } from '../../db/topology';
import { inTransaction } from '../../db/transaction';
import { recordDigest, type RecordId, type StoredResponse } from '../record';
import { evictionChannel } from './statements';
import { epochMs, interval, plusMs } from './sql-time';

/** A probe this process holds: only its token may write what the probe found. */
export interface ProbeTicket {
  readonly id: RecordId;
  readonly route: string;
  readonly token: string;
  /** The original body, when it was kept. */
  readonly body: Buffer | null;
  /** Probes taken of the record so far, this one included. */
  readonly probes: number;
}

export interface ProbeTiming {
  /** "Not found" is trusted this long after the original was sent (created_at). */
  readonly afterMs: number;
  readonly giveUpAfterMs: number;
  /** How long a taken probe holds the record before the next (doubled per probe, up to 32×). */
  readonly holdMs: number;
}

/** An unknown outcome just given up: past giveUpAfter, never probed again. */
export interface GivenUp {
  readonly id: RecordId;
  /** Probes made of it. */
  readonly probes: number;
  /** Since the original was sent (created_at), in milliseconds. */
  readonly ageMs: number;
}

export type ProbeTake =
  | { readonly kind: 'taken'; readonly ticket: ProbeTicket }
  /** Not due yet (dueInMs), or past giveUpAfter (null). */
  | { readonly kind: 'not-due'; readonly dueInMs: number | null }
  /** No unknown outcome under this key any more (resolved, cleared, expired). */
  | { readonly kind: 'gone' };

const secs = (param: string): string => interval(`${param}::bigint`);
const WHERE_KEY = 'scope = $1::text AND tenant = $2::text AND key = $3::text';
const UNKNOWN = "state = 'completed' AND outcome_unknown AND expires_at > now()";
/** "now" as a row a statement joins, so that RETURNING can measure from it (sql-time.ts). */
const CLOCK = '(SELECT now() AS now) AS clock';
/** Milliseconds from the clock row to `timestamp`, at least 0. */
const msFromClock = (timestamp: string): string =>
  `GREATEST(0, ceil(extract(epoch FROM (${timestamp} - clock.now)) * 1000))::float8`;
/** Due for a probe: `after` (a parameter) has passed since the original was sent, or probe_after. */
const DUE = (after: string): string =>
  `(probe_after <= now() OR (probe_after IS NULL AND created_at <= now() - ${secs(after)}))`;
/** Within giveUpAfter (a parameter) of the original, and so still probed. */
const PROBING = (giveUpAfter: string): string => `created_at > now() - ${secs(giveUpAfter)}`;
/** The wait before the next probe: the hold, doubled per probe taken so far, up to 32×. */
const NEXT_PROBE = (hold: string, probes: string): string =>
  plusMs('now()', `${hold}::bigint * power(2, LEAST(${probes}, 5))`);
/** A probe token: a v4-shaped uuid from a seed this process drew (a parameter) and the record. */
const TOKEN = (seed: string, alias = ''): string =>
  `md5(${seed}::text || ${alias}scope || E'\\n' || ${alias}tenant || E'\\n' || ${alias}key)::uuid`;
/** The record's history says it was given up (the listing reads the same event). */
export const GAVE_UP = `events @> '[{"event":"gave_up"}]'::jsonb`;

export class ReconcileStore {
  private readonly table: string;
  private readonly lockKey: string;
  private readonly giveUpStatement: string;
  private distributed: Promise<boolean> | undefined;

  constructor(
    private readonly pool: Pool,
    private readonly tableName: string,
  ) {
    this.table = quoteTableName(tableName);
    // Giving up writes only the history: the record stays as it is, for an operator. A probe taken
    // just before keeps its token, so what it finds still lands.
    // The probe count goes in with jsonb_set: jsonb_build_object is STABLE, so on Citus it may see
    // no column.
    this.giveUpStatement = `UPDATE ${this.table} SET
              events = events || jsonb_set(jsonb_build_array(jsonb_build_object(
                'event', 'gave_up', 'at', now())), '{0,probes}', probes::text::jsonb)
              FROM ${CLOCK}`;
    this.lockKey = `idempotency-proxy:reconcile:${tableName}`;
  }

  /**
   * Keeps the original body with the unknown outcome just stored under `claimToken`; returns how long
   * until its first probe is due, or null when the record no longer holds that outcome.
   */
  async keep(
    id: RecordId,
    claimToken: string,
    body: Buffer,
    afterMs: number,
  ): Promise<number | null> {
    const { rows } = await this.pool.query<{ due_in_ms: number }>(
      `UPDATE ${this.table} SET reconcile_body = $5::bytea, probes = 0, probe_token = NULL,
              probe_after = ${plusMs('created_at', '$6::bigint')}
       FROM ${CLOCK}
       WHERE ${WHERE_KEY} AND claim_token::text = $4::text AND ${UNKNOWN}
       RETURNING ${msFromClock('probe_after')} AS due_in_ms`,
      [id.scope, id.tenant, id.key, claimToken, body, afterMs],
    );
    return rows[0]?.due_in_ms ?? null;
  }

  /** Takes the record's probe if it is due. */
  async take(id: RecordId, timing: ProbeTiming): Promise<ProbeTake> {
    const token = randomUUID();
    const { rows } = await this.pool.query<TicketRow>(
      `UPDATE ${this.table} SET probe_token = $4::uuid, probes = probes + 1,
              probe_after = ${NEXT_PROBE('$5', 'probes')}
       WHERE ${WHERE_KEY} AND ${UNKNOWN} AND ${DUE('$6')} AND ${PROBING('$7')}
       RETURNING scope, tenant, key, route, probe_token::text AS token, reconcile_body, probes`,
      [id.scope, id.tenant, id.key, token, timing.holdMs, timing.afterMs, timing.giveUpAfterMs],
    );
    if (rows[0]) return { kind: 'taken', ticket: ticketOf(rows[0]) };
    return this.dueIn(id, timing);
  }

  /** When the record's next probe is due, without taking it. */
  async dueIn(id: RecordId, timing: ProbeTiming): Promise<Exclude<ProbeTake, { kind: 'taken' }>> {
    const due = await this.pool.query<{ due_in_ms: number; probing: boolean }>(
      `SELECT ${msFromClock(`COALESCE(probe_after, created_at + ${secs('$4')})`)} AS due_in_ms,
              ${PROBING('$5')} AS probing
       FROM ${this.table}, ${CLOCK} WHERE ${WHERE_KEY} AND ${UNKNOWN}`,
      [id.scope, id.tenant, id.key, timing.afterMs, timing.giveUpAfterMs],
    );
    const row = due.rows[0];
    if (!row) return { kind: 'gone' };
    return { kind: 'not-due', dueInMs: row.probing ? Math.max(row.due_in_ms, 1) : null };
  }

  /**
   * Gives up the record if it is past giveUpAfter and not given up yet: the one call that does gets
   * it back (so it is told once, whoever finds it), every other call null.
   */
  async giveUp(id: RecordId, timing: ProbeTiming): Promise<GivenUp | null> {
    const { rows } = await this.pool.query<GivenUpRow>(
      `${this.giveUpStatement}
       WHERE ${WHERE_KEY} AND ${UNKNOWN} AND NOT ${GAVE_UP} AND NOT ${PROBING('$4')}
       RETURNING ${GIVEN_UP_COLUMNS}`,
      [id.scope, id.tenant, id.key, timing.giveUpAfterMs],
    );
    return rows[0] ? givenUpOf(rows[0]) : null;
  }

  /**
   * Takes the due probes of one route's unknown outcomes, at most `limit`, under the sweep's
   * try-lock: undefined when another instance is sweeping now. The lock is transaction-level, held
   * only while the probes are taken, never while they run (see pruner.ts on why not a session lock).
   * The records of the route past giveUpAfter are given up in the same round (at most `limit`).
   * On Citus the pick takes no row locks (see the top of this file).
   */
  async takeDue(
    route: string,
    timing: ProbeTiming,
    limit: number,
  ): Promise<{ tickets: ProbeTicket[]; givenUp: GivenUp[] } | undefined> {
    const pick = (await this.isDistributed()) ? '' : 'FOR UPDATE SKIP LOCKED';
    return inTransaction(this.pool, async (client) => {
      const locked = await client.query<{ locked: boolean }>(
        'SELECT pg_try_advisory_xact_lock(hashtext($1::text)) AS locked',
        [`${this.lockKey}:${route}`],
      );
      if (!locked.rows[0]?.locked) return undefined;
      // The age is checked again beside the clock the answer reports from: on Citus the subquery
      // runs apart, on a worker whose now() is a few ms later than this statement's.
      const givenUp = await client.query<GivenUpRow>(
        `${this.giveUpStatement}
         WHERE (scope, tenant, key) IN (
           SELECT scope, tenant, key FROM ${this.table}
           WHERE ${UNKNOWN} AND route = $1::text AND NOT ${GAVE_UP} AND NOT ${PROBING('$2')}
           ORDER BY created_at LIMIT $3::int ${pick})
           AND ${UNKNOWN} AND NOT ${GAVE_UP} AND NOT ${PROBING('$2')}
         RETURNING ${GIVEN_UP_COLUMNS}`,
        [route, timing.giveUpAfterMs, limit],
      );
      const { rows } = await client.query<TicketRow>(
        `UPDATE ${this.table} AS r
           SET probe_token = ${TOKEN('$6', 'r.')},
               probes = r.probes + 1,
               probe_after = ${NEXT_PROBE('$2', 'r.probes')}
         WHERE (r.scope, r.tenant, r.key) IN (
           SELECT scope, tenant, key FROM ${this.table}
           WHERE ${UNKNOWN} AND route = $1::text AND ${DUE('$3')} AND ${PROBING('$4')}
           ORDER BY created_at LIMIT $5::int ${pick})
           AND ${UNKNOWN} AND ${DUE('$3')} AND ${PROBING('$4')}
         RETURNING r.scope, r.tenant, r.key, r.route, r.probe_token::text AS token,
                   r.reconcile_body, r.probes`,
        [route, timing.holdMs, timing.afterMs, timing.giveUpAfterMs, limit, randomUUID()],
      );
      return { tickets: rows.map(ticketOf), givenUp: givenUp.rows.map(givenUpOf) };
    });
  }

  /**
   * The probe found the call: the record is completed with `response`, replayed from now on.
   * Returns its expiry (epoch ms), or null when the ticket no longer holds the record.
   */
  async found(ticket: ProbeTicket, response: StoredResponse): Promise<number | null> {
    const { id } = ticket;
    return inTransaction(this.pool, async (client) => {
      const { rows } = await client.query<{ expires_at_ms: number }>(
        `UPDATE ${this.table} SET status = $5::smallint, headers = $6::jsonb, body = $7::bytea,
                body_omitted = false, outcome_unknown = false, completed_at = now(),
                reconcile_body = NULL, probe_after = NULL, probe_token = NULL,
                events = events || jsonb_build_array(jsonb_build_object(
                  'event', 'reconciled', 'at', now(), 'status', $5::smallint))
         WHERE ${WHERE_KEY} AND probe_token = $4::uuid AND ${UNKNOWN}
         RETURNING ${epochMs('expires_at')} AS expires_at_ms`,
        [
          id.scope,
          id.tenant,
          id.key,
          ticket.token,
          response.status,
          JSON.stringify(response.headers),
          response.body,
        ],
      );
      if (!rows[0]) return null;
      await this.evict(client, id);
      return rows[0].expires_at_ms;
    });
  }

  /** The probe says the call never happened: the record goes, so the next request runs. */
  async notFound(ticket: ProbeTicket): Promise<boolean> {
    const { id } = ticket;
    return inTransaction(this.pool, async (client) => {
      const { rowCount } = await client.query(
        `DELETE FROM ${this.table} WHERE ${WHERE_KEY} AND probe_token = $4::uuid AND ${UNKNOWN}`,
        [id.scope, id.tenant, id.key, ticket.token],
      );
      if (rowCount !== 1) return false;
      await this.evict(client, id);
      return true;
    });
  }

  /** Asked once; a failed look-up is asked again next time. */
  private isDistributed(): Promise<boolean> {
    this.distributed ??= isDistributed(this.pool, this.tableName).catch((error: unknown) => {
      this.distributed = undefined;
      throw error;
    });
    return this.distributed;
  }

  /** Every instance's replay cache forgets the record (the NOTIFY is sent when this commits). */
  private async evict(client: { query: Pool['query'] }, id: RecordId): Promise<void> {
    await client.query('SELECT pg_notify($1::text, $2::text)', [
      evictionChannel(this.tableName),
      recordDigest(id),
    ]);
  }
}

interface TicketRow {
  scope: string;
  tenant: string;
  key: string;
  route: string;
  token: string;
  reconcile_body: Buffer | null;
  probes: number;
}

const GIVEN_UP_COLUMNS = `scope, tenant, key, probes,
  floor(extract(epoch FROM (clock.now - created_at)) * 1000)::float8 AS age_ms`;

interface GivenUpRow {
  scope: string;
  tenant: string;
  key: string;
  probes: number;
  age_ms: number;
}

function givenUpOf(row: GivenUpRow): GivenUp {
  return {
    id: { scope: row.scope, tenant: row.tenant, key: row.key },
    probes: row.probes,
    ageMs: row.age_ms,
  };
}

function ticketOf(row: TicketRow): ProbeTicket {
  return {
    id: { scope: row.scope, tenant: row.tenant, key: row.key },
    route: row.route,
    token: row.token,
    body: row.reconcile_body,
    probes: row.probes,
  };
}
