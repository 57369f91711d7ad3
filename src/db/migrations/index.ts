// Forward-only schema migrations. Each runs once; all that are due run in one transaction under
// the migration advisory lock (see migrate.ts), so no lock outlives it behind a transaction pooler.
// Never edit a released migration: add the next number.
//
// The table name is configurable, so migrations are functions of the quoted name.

export interface Migration {
  readonly version: number;
  readonly name: string;
  readonly sql: (table: string, tableName: string) => string;
}

export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: 'create the keys table',
    // One row per (scope, tenant, key): the primary key is the lock. `claim_token` is new for every
    // claim, takeover or re-claim after expiry: the claim statement compares it to tell whether this
    // request won the row, and completion, release, takeover and settling carry it, so a slow former
    // holder can never write over a newer claim — even one made after a release deleted the row.
    // `fence` counts claims of the row (1 for the first, +1 per takeover or re-claim after expiry),
    // for the record's history.
    sql: (table, tableName) => `
      CREATE TABLE ${table} (
        scope            text        NOT NULL,
        tenant           text        NOT NULL DEFAULT '',
        key              text        NOT NULL,
        route            text        NOT NULL,
        fingerprint      bytea       NOT NULL,
        state            text        NOT NULL CHECK (state IN ('in_progress', 'completed')),
        claim_token      uuid        NOT NULL,
        fence            bigint      NOT NULL DEFAULT 1,
        lease_expires_at timestamptz,
        status           smallint,
        headers          jsonb,
        body             bytea,
        body_omitted     boolean     NOT NULL DEFAULT false,
        outcome_unknown  boolean     NOT NULL DEFAULT false,
        attempts         integer     NOT NULL DEFAULT 1,
        replays          integer     NOT NULL DEFAULT 0,
        created_at       timestamptz NOT NULL DEFAULT now(),
        completed_at     timestamptz,
        last_seen_at     timestamptz NOT NULL DEFAULT now(),
        expires_at       timestamptz NOT NULL,
        PRIMARY KEY (scope, tenant, key)
      ) WITH (fillfactor = 85);
      CREATE INDEX "${tableName}_expires_at_idx" ON ${table} (expires_at);
    `,
  },
  {
    version: 2,
    name: 'keep a history of state changes per record',
    // What `inspect` and the admin API show as a record's history: each claim, takeover, completion
    // and unknown-outcome settlement, with its time and fence. Repeats only bump the counters.
    sql: (table) => `
      ALTER TABLE ${table} ADD COLUMN events jsonb NOT NULL DEFAULT '[]'::jsonb;
    `,
  },
  {
    version: 3,
    name: 'prune by a column completion leaves alone',
    // The pruner needs an index on when a row may go. On expires_at, every completion changed an
    // indexed column, so no completion could be a HOT update: each wrote new entries into both
    // indexes. prune_after is set with the claim (claim + lease + ttl) and only ever moves later, so
    // a completion within its lease leaves it as it is, and PostgreSQL can update the row in place.
    // Invariant: prune_after >= expires_at; the pruner checks both.
    sql: (table, tableName) => `
      ALTER TABLE ${table} ADD COLUMN prune_after timestamptz;
      UPDATE ${table} SET prune_after = expires_at;
      ALTER TABLE ${table} ALTER COLUMN prune_after SET NOT NULL;
      CREATE INDEX "${tableName}_prune_after_idx" ON ${table} (prune_after);
      DROP INDEX IF EXISTS "${tableName}_expires_at_idx";
    `,
  },
  {
    version: 4,
    name: 'find unknown outcomes without a scan',
    // The admin console lists the records that wait for an operator: the unknown outcomes. They are
    // rare, so a partial index holds only them. Its column and predicate are ones the request path
    // leaves alone (created_at is set by the claim; outcome_unknown changes only when an unknown
    // outcome is stored), so completions and replays stay HOT updates; an index on last_seen_at or
    // state would have cost every repeat or every completion a new index entry. The listing sorts
    // the few indexed rows by last_seen_at itself. Building it scans the table once under a lock
    // that holds writes back meanwhile (seconds per million rows).
    sql: (table, tableName) => `
      CREATE INDEX "${tableName}_unknown_idx" ON ${table} (created_at) WHERE outcome_unknown;
    `,
  },
  {
    version: 5,
    name: 'keep what a reconcile probe needs with an unknown outcome',
    // An unknown outcome on a route with idempotency.reconcile is resolved by asking the upstream
    // (docs/reconcile.md). The probe's path may name fields of the original body, so the body stays
    // with the record until it is resolved (then NULL). probe_after is when the next probe is due
    // (NULL: created_at + after); a probe is taken by setting it ahead, with a probe_token the
    // resolving write must carry, so two instances never probe one record in one period. Nullable
    // columns and a constant default: no table rewrite. The unknown-outcome index (migration 4)
    // finds the records a sweep looks at.
    sql: (table) => `
      ALTER TABLE ${table} ADD COLUMN reconcile_body bytea;
      ALTER TABLE ${table} ADD COLUMN probe_after timestamptz;
      ALTER TABLE ${table} ADD COLUMN probe_token uuid;
      ALTER TABLE ${table} ADD COLUMN probes integer NOT NULL DEFAULT 0;
    `,
  },
  {
    version: 6,
    name: 'keep what arrived of an answer that broke off with its unknown outcome',
    // A streamed answer that stalls or drops mid-way is settled as an unknown outcome; what its
    // client was sent (the status, headers and byte count in partial_answer, the first
    // maxResponseBytes of the body in partial_body) is written by the same completion, for the
    // operator only: it is never replayed. NULL on every other record; a re-claim after expiry
    // clears it. Nullable columns without a default: no table rewrite.
    sql: (table) => `
      ALTER TABLE ${table} ADD COLUMN partial_answer jsonb;
      ALTER TABLE ${table} ADD COLUMN partial_body bytea;
    `,
  },
  {
    version: 7,
    name: 'keep the handle a long call was answered with',
    // A call not answered within its route's `after` is answered with a handle instead (an HTTP
    // 202 with a status monitor, an MCP task: docs/long-calls.md), and polled on any instance.
    // `handle` holds the handle's random secret, which every poll must carry, and whether a cancel
    // was asked for. Set once per claim by whoever answers first with a handle; a takeover keeps
    // it, a re-claim after expiry clears it, a release deletes the row with it. A nullable column
    // without a default: no table rewrite.
    sql: (table) => `
      ALTER TABLE ${table} ADD COLUMN handle jsonb;
    `,
  },
];
