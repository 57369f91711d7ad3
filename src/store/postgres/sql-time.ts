// Time arithmetic in SQL that runs unchanged on PostgreSQL and on a Citus distributed table.
//
// Citus asks two things of an expression that touches a row: in RETURNING, only IMMUTABLE
// functions; elsewhere in an UPDATE or INSERT … ON CONFLICT, no STABLE function called with a
// column (it evaluates STABLE calls once on the coordinator, before it routes the statement). Two
// everyday operators are STABLE because they read the session's time zone: `timestamptz + interval`
// and `extract(epoch FROM timestamptz)`. The helpers here say the same things with IMMUTABLE parts:
// a difference of two timestamptz and extract(… FROM interval) are IMMUTABLE, and so is
// to_timestamp(float8). now() alone, with no column, is fine anywhere but RETURNING: Citus folds it
// into a constant first.

/** An interval of `milliseconds` (a bigint expression or parameter). */
export const interval = (milliseconds: string): string =>
  `make_interval(secs => ${milliseconds} / 1000.0)`;

/** A timestamptz as epoch milliseconds, float8 (pg reads bigint as text). IMMUTABLE. */
export const epochMs = (timestamp: string): string =>
  `floor(extract(epoch FROM (${timestamp} - to_timestamp(0))) * 1000)::float8`;

/**
 * `timestamp` plus `milliseconds`, when the milliseconds depend on a column: IMMUTABLE arithmetic
 * on epoch seconds instead of the STABLE `timestamptz + interval`. `timestamp` may be now().
 */
export const plusMs = (timestamp: string, milliseconds: string): string =>
  `to_timestamp(extract(epoch FROM (${timestamp} - to_timestamp(0))) + (${milliseconds}) / 1000.0)`;
