// The SQL of the PostgreSQL KeyStore, as literal statements built once per table. Time comes from
// PostgreSQL (now(), intervals), never from this process's clock, so instances with skewed clocks
// agree.
//
// The same statements run on a Citus distributed table (docs/store-topologies.md), which asks three things
// of them: no function that is not IMMUTABLE in RETURNING (Citus runs RETURNING on the shard), no
// STABLE function (now(), jsonb_build_object) called with a column of the row (Citus evaluates
// those once on the coordinator, before it routes the statement), and no NOTIFY inside a statement
// Citus sends to a worker (the LISTENing sessions are on the coordinator). So "now" reaches
// RETURNING as last_seen_at, which each claim sets to now(); deadlines are computed from parameters
// alone; and on Citus the nudge to waiters is a statement of its own, on the coordinator
// (key-store.ts, nudgeWaiters).
import { quoteTableName } from '../../db/identifier';
import { epochMs, interval as ms } from './sql-time';

/**
 * A one-element jsonb array for the record's history (migration 2). The fence, a column expression,
 * is put in with jsonb_set and casts, which are IMMUTABLE; jsonb_build_* are STABLE, so on Citus
 * they may only see parameters and now() (see the top of this file).
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
 * them too (or only `columns` of them). `notify` is pg_notify's arguments, over `done`'s columns or
 * parameters. On a Citus
 * distributed table (`notify` undefined) the write goes alone: Citus would send the NOTIFY to the
 * worker along with it, and the store nudges from the coordinator instead (nudgeWaiters).
 */
function withNudge(write: string, notify: string | undefined, columns = 'done.*'): string {
  if (notify === undefined) return write;
  return `
      WITH done AS (${write}
      ), nudge AS (SELECT pg_notify(${notify}) FROM done WHERE attempts > 1)
      SELECT ${columns}, (SELECT count(*) FROM nudge)::int AS nudged FROM done`;
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
    partial_answer: ['NULL', 'r.partial_answer'],
    partial_body: ['NULL', 'r.partial_body'],
    handle: ['NULL', 'r.handle'],
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
 * Claims and completions come alone or in batches (natural-batcher.ts), in one of three shapes:
 * - 'one', a lone call: one VALUES row of parameters, the cheapest to plan and run (an unnest of
 *   one costs 15–20 % more per claim, measured);
 * - 'batch' on PostgreSQL: one array per column, unnested: one statement, prepared once per
 *   connection, whatever the batch size;
 * - a number n on a Citus distributed table: n VALUES rows of parameters, every key on one shard
 *   (key-store.ts groups them so). That is the shape Citus routes straight to the shard, with the
 *   deadlines computed in the rows, from parameters (see the top of this file); an unnest is not:
 *   Citus would pull its rows to the coordinator and insert them from there. One statement per
 *   batch size, prepared once per connection.
 */
export type Shape = 'one' | 'batch' | number;

type Column = readonly [name: string, type: string];

/** The columns as `unnest($first::type[], …) WITH ORDINALITY AS alias(names…, n)`. */
function unnested(columns: readonly Column[], first: number, alias: string): string {
  const arrays = columns.map(([, type], k) => `$${first + k}::${type}[]`);
  const names = columns.map(([name]) => name);
  return `unnest(${arrays.join(', ')}) WITH ORDINALITY AS ${alias}(${names.join(', ')}, n)`;
}

/** Each column's value in one row: `alias.name` from an unnest, or `$k::type` for one call. */
function valuesOf(
  columns: readonly Column[],
  source: { alias: string } | { first: number },
): Record<string, string> {
  return Object.fromEntries(
    columns.map(([name, type], k) => [
      name,
      'alias' in source ? `${source.alias}.${name}` : `$${source.first + k}::${type}`,
    ]),
  );
}

/** `rows` VALUES rows of parameters from $first on, each `(…)` as `row` writes it (n from 1). */
function parameterRows(
  shape: 'one' | number,
  columns: readonly Column[],
  first: number,
  row: (values: Record<string, string>, n: number) => string,
): string {
  const rows = shape === 'one' ? 1 : shape;
  return Array.from(
    { length: rows },
    (_, k) => `(${row(valuesOf(columns, { first: first + k * columns.length }), k + 1)})`,
  ).join(',\n        ');
}

const COMPLETE_COLUMNS: readonly Column[] = [
  ['scope', 'text'],
  ['tenant', 'text'],
  ['key', 'text'],
  ['claim_token', 'text'],
  ['status', 'smallint'],
  ['headers', 'jsonb'],
  ['body', 'bytea'],
  ['body_omitted', 'boolean'],
  ['outcome_unknown', 'boolean'],
  ['ttl_ms', 'bigint'],
];

/**
 * What an unknown outcome of an answer that broke off keeps for the operator (migration 6): its
 * status, headers and byte count, and the first bytes of its body. Only the completion that carries
 * one sends these columns (completeStatement's `partial`): every other completion's statement is
 * the same as without them.
 */
const PARTIAL_COLUMNS: readonly Column[] = [
  ['partial_answer', 'jsonb'],
  ['partial_body', 'bytea'],
];

/** The completion's input columns, with the partial answer's before the ttl (always last). */
function completeColumns(partial: boolean): readonly Column[] {
  if (!partial) return COMPLETE_COLUMNS;
  return [...COMPLETE_COLUMNS.slice(0, -1), ...PARTIAL_COLUMNS, COMPLETE_COLUMNS.at(-1)!];
}

/**
 * A record's expiry as epoch milliseconds (float8: pg reads bigint as text), for Idempotency-Expires:
 * the database's time, like every other time the store keeps.
 */
const EXPIRES_AT_MS = (column: string): string => `${epochMs(column)} AS expires_at_ms`;

/**
 * Completion: one statement for one or several completions, an input row each with its own fence
 * check (the holder's claim_token, compared as text so a foreign fence is refused, not an error);
 * the new expiry is computed in the input row, from its ttl. Nudges waiters (withNudge).
 * Returns the ordinals (n, from 1) of the input rows it changed, with their new expiry. On PostgreSQL $1 is the NOTIFY
 * channel; then come the completion's values, or the batch's arrays, one per column.
 */
export function completeStatement(
  tableName: string,
  shape: Shape,
  distributed = false,
  partial = false,
): string {
  const t = quoteTableName(tableName);
  if (distributed && shape === 'one') return loneCompletionOnCitus(t, partial);
  const columns = completeColumns(partial);
  const names = columns.slice(0, -1).map(([name]) => name);
  const row = (v: Record<string, string>): string =>
    `${names.map((name) => v[name]).join(', ')}, now() + ${ms(v.ttl_ms!)}`;
  const first = distributed ? 1 : 2;
  const input =
    shape === 'batch'
      ? `(SELECT u.n::int, ${row(valuesOf(columns, { alias: 'u' }))}
                FROM ${unnested(columns, first, 'u')})`
      : `(VALUES ${parameterRows(shape, columns, first, (v, n) => `${n}, ${row(v)}`)})`;
  // Citus cannot see the keys through VALUES rows, and would send the statement to every shard: a
  // distributed transaction, with a two-phase commit on every worker. The keys as a list of their
  // own let it prune to the one shard.
  const key = first + columns.findIndex(([name]) => name === 'key');
  const keys = (rows: number): string =>
    Array.from({ length: rows }, (_, k) => `$${key + k * columns.length}::text`).join(', ');
  const shardFilter =
    distributed && typeof shape === 'number' ? `\n          AND r.key IN (${keys(shape)})` : '';
  const update = `
        UPDATE ${t} AS r SET ${completionAssignments((name) => `i.${name}`, 'i.expires_at', partial)}
        FROM ${input}
          AS i(n, ${names.join(', ')}, expires_at)
        WHERE r.scope = i.scope AND r.tenant = i.tenant AND r.key = i.key
          AND r.claim_token::text = i.claim_token
          AND r.state = 'in_progress'${shardFilter}
        RETURNING i.n, r.scope, r.tenant, r.key, r.attempts, ${EXPIRES_AT_MS('i.expires_at')}`;
  const notify = `$1::text, ${recordDigestSql('scope', 'tenant', 'key')}`;
  // Only the ordinal and the expiry go back to the store: every column returned is described and
  // read again on each call.
  return withNudge(update, distributed ? undefined : notify, 'done.n, done.expires_at_ms');
}

/**
 * What a completion sets: each column from `value` (an input row's, or a parameter) and the expiry
 * as `expiresAt` computes it.
 */
function completionAssignments(
  value: (name: string) => string,
  expiresAt: string,
  partial: boolean,
): string {
  const partialSet = partial
    ? `
               partial_answer = ${value('partial_answer')}, partial_body = ${value('partial_body')},`
    : '';
  return `state = 'completed', status = ${value('status')}, headers = ${value('headers')}, body = ${value('body')},
               body_omitted = ${value('body_omitted')}, outcome_unknown = ${value('outcome_unknown')}, completed_at = now(),
               lease_expires_at = NULL, expires_at = ${expiresAt},${partialSet}
               prune_after = GREATEST(r.prune_after, ${expiresAt})`;
}

/**
 * A lone completion on a Citus distributed table: the row's own UPDATE, its values in place. Citus
 * plans a single VALUES row as a subquery of its own: computed on the coordinator and copied to the
 * worker before the UPDATE, a round trip more. Returns what the VALUES shapes return (n is 1).
 */
function loneCompletionOnCitus(t: string, partial: boolean): string {
  const v = valuesOf(completeColumns(partial), { first: 1 });
  const set = completionAssignments((name) => v[name]!, `now() + ${ms(v.ttl_ms!)}`, partial);
  return `
        UPDATE ${t} AS r SET ${set}
        WHERE r.scope = ${v.scope} AND r.tenant = ${v.tenant} AND r.key = ${v.key}
          AND r.claim_token::text = ${v.claim_token} AND r.state = 'in_progress'
        RETURNING 1, r.scope, r.tenant, r.key, r.attempts, ${EXPIRES_AT_MS('r.expires_at')}`;
}

const CLAIM_COLUMNS: readonly Column[] = [
  ['scope', 'text'],
  ['tenant', 'text'],
  ['key', 'text'],
  ['route', 'text'],
  ['fingerprint', 'bytea'],
  ['claim_token', 'uuid'],
  ['lease_ms', 'bigint'],
  ['expiry_ms', 'bigint'],
];

/**
 * Claim-or-read, for one request or several in one statement: an input row each, distinct keys, in
 * the order given (key-store.ts sorts them, so that concurrent batches lock rows in one order). A
 * new row, or an expired one, is claimed (its claim_token is the request's); any other row is
 * returned as it stands, with the audit counters bumped. Rows come back keyed by (scope, tenant,
 * key: a batch's rows carry the key, after the columns rows.ts reads; a lone call's row needs none,
 * and every column returned is described and read again on each call); the request compares the
 * token and fingerprint itself. Both branches set last_seen_at to
 * the row's now(): RETURNING measures the lease and the expiry from it, not from now() itself (see
 * the top of this file). $1… are one claim's values, or the batch's arrays, one per column.
 */
export function claimStatement(tableName: string, shape: Shape): string {
  const row = (v: Record<string, string>): string =>
    `${v.scope}, ${v.tenant}, ${v.key}, ${v.route}, ${v.fingerprint}, 'in_progress', ` +
    `${v.claim_token}, 1, now() + ${ms(v.lease_ms!)}, now() + ${ms(v.expiry_ms!)}, ` +
    `now() + ${ms(v.expiry_ms!)}, now(), now()`;
  const input =
    shape === 'batch'
      ? `SELECT ${row(valuesOf(CLAIM_COLUMNS, { alias: 'i' }))}
      FROM ${unnested(CLAIM_COLUMNS, 1, 'i')}
      ORDER BY i.n`
      : `VALUES ${parameterRows(shape, CLAIM_COLUMNS, 1, row)}`;
  return `
      INSERT INTO ${quoteTableName(tableName)} AS r (scope, tenant, key, route, fingerprint, state,
                             claim_token, fence, lease_expires_at, expires_at, prune_after,
                             created_at, last_seen_at)
      ${input}
      ON CONFLICT (scope, tenant, key) DO UPDATE SET
        ${claimUpsertAssignments()}
      RETURNING
        r.claim_token::text AS claim_token,
        r.state,
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
          AS expires_in_ms,
        ${EXPIRES_AT_MS('r.expires_at')}${shape === 'one' ? '' : ', r.scope, r.tenant, r.key'}`;
}

/**
 * Every statement of the store for one table. On a Citus distributed table (`distributed`) the
 * writes take no NOTIFY parameters (withNudge), and only the lone-call claim and completion are
 * used.
 */
export function buildStatements(tableName: string, distributed = false) {
  const t = quoteTableName(tableName);
  const where = 'scope = $1::text AND tenant = $2::text AND key = $3::text';
  const notify = (channel: string, payload: string): string | undefined =>
    distributed ? undefined : `${channel}::text, ${payload}::text`;
  return {
    claimOne: claimStatement(tableName, 'one'),
    claimBatch: claimStatement(tableName, 'batch'),
    completeOne: completeStatement(tableName, 'one', distributed),
    completeBatch: completeStatement(tableName, 'batch', distributed),
    // A lone completion with the partial answer of a stream that broke off (never batched).
    completePartial: completeStatement(tableName, 'one', distributed, true),
    // Release, like completion, nudges waiters.
    release: withNudge(
      `
        DELETE FROM ${t} WHERE ${where} AND claim_token::text = $4::text AND state = 'in_progress'
        RETURNING attempts`,
      notify('$5', '$6'),
    ),
    takeOver: `
      UPDATE ${t} SET claim_token = $5::uuid, fence = fence + 1, lease_expires_at = now() + ${ms('$6::bigint')},
             expires_at = GREATEST(expires_at, now() + ${ms('$7::bigint')}),
             prune_after = GREATEST(prune_after, now() + ${ms('$7::bigint')}),
             events = events || ${event("'taken_over'", 'fence + 1')}
      WHERE ${where} AND claim_token::text = $4::text AND state = 'in_progress' AND lease_expires_at <= now()
      RETURNING claim_token::text AS fence`,
    settleUnknown: withNudge(
      `
        UPDATE ${t} SET state = 'completed', status = $5::smallint, headers = $6::jsonb, body = $7::bytea,
               body_omitted = false, outcome_unknown = true, completed_at = now(),
               lease_expires_at = NULL, expires_at = now() + ${ms('$8::bigint')},
               prune_after = GREATEST(prune_after, now() + ${ms('$8::bigint')}), replays = replays + 1,
               events = events || ${event("'settled_unknown'", 'fence', '$5::smallint')}
        WHERE ${where} AND claim_token::text = $4::text AND state = 'in_progress' AND lease_expires_at <= now()
        RETURNING status, headers, body, body_omitted, outcome_unknown, attempts,
                  ${EXPIRES_AT_MS('expires_at')}`,
      notify('$9', '$10'),
    ),
    // The answer of the claim whose lease ended and was settled as an unknown outcome by another
    // request: the upstream did answer, so the real answer replaces the provisional one (only the
    // unknown outcome that settleUnknown wrote, under the same token, while the record lives). Its
    // reconcile probe, if any, has nothing left to ask. Its parameters are a lone completion's (an
    // answer: outcome_unknown false). Unknown outcomes are never kept in replay
    // caches (coalescing-store.ts), so no cache holds what this replaces.
    replaceUnknown: `
      UPDATE ${t} SET status = $5::smallint, headers = $6::jsonb, body = $7::bytea,
             body_omitted = $8::boolean, outcome_unknown = $9::boolean, completed_at = now(),
             expires_at = GREATEST(expires_at, now() + ${ms('$10::bigint')}),
             prune_after = GREATEST(prune_after, now() + ${ms('$10::bigint')}),
             partial_answer = NULL, partial_body = NULL,
             reconcile_body = NULL, probe_after = NULL, probe_token = NULL,
             events = events || ${event("'replaced_unknown'", 'fence', '$5::smallint')}
      WHERE ${where} AND claim_token::text = $4::text AND state = 'completed' AND outcome_unknown
        AND expires_at > now() AND events @> '[{"event": "settled_unknown"}]'::jsonb
      RETURNING ${EXPIRES_AT_MS('expires_at')}`,
    // Whether a claim still holds its record in progress (before an unknown outcome is settled).
    stillClaimed: `
      SELECT 1 FROM ${t} WHERE ${where} AND claim_token::text = $4::text AND state = 'in_progress'`,
    // After a completion sent again changed nothing: whether an earlier attempt, whose reply was
    // lost with its connection, had stored this answer (the row carries the token, completed with
    // this status and outcome). Not a settled-unknown answer under the same token, which differs.
    completedWith: `
      SELECT 1 FROM ${t} WHERE ${where} AND claim_token::text = $4::text AND state = 'completed'
        AND status = $5::smallint AND outcome_unknown = $6::boolean`,
    // Counter increments gathered by the replay cache, one statement per flush; on Citus one per
    // shard, whose keys, as an array of their own, let Citus prune to that shard (through unnest
    // it cannot see them, and would update every shard in a two-phase commit).
    flushCounters: `
      UPDATE ${t} AS r SET attempts = r.attempts + d.attempts, replays = r.replays + d.replays,
             last_seen_at = now()
      FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::int[])
        AS d(scope, tenant, key, attempts, replays)
      WHERE r.scope = d.scope AND r.tenant = d.tenant AND r.key = d.key AND r.state = 'completed'${
        distributed ? '\n        AND r.key = ANY($3::text[])' : ''
      }`,
    // Read-only look for waiters: no counters bumped, nothing locked.
    peek: `
      SELECT state, fingerprint = $4::bytea AS same_fingerprint, expires_at <= now() AS expired,
             GREATEST(0, ceil(extract(epoch FROM (lease_expires_at - now())) * 1000))::int
               AS lease_remaining_ms
      FROM ${t} WHERE ${where}`,
  } as const;
}

/** The NOTIFY channel operator clears are announced on, so every replay cache evicts the record. */
export function evictionChannel(tableName: string): string {
  return `ip_evict_${tableName}`;
}

/** The NOTIFY channel that completions and releases of this table are announced on. */
export function completionChannel(tableName: string): string {
  return `ip_done_${tableName}`;
}
