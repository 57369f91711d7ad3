// What a failed write to the store means for trying it again: whether another attempt may succeed
// (retryable), and whether the failed statement may have committed all the same (its reply was
// lost with its connection). Kept free of pg imports, like store-failure.ts.
import { isPoolExhausted } from './store-failure';

/**
 * SQLSTATEs after which the same write, sent again (on another connection), may succeed: the
 * server was going away, starting, short of resources, or the statement lost a race it may win
 * next time. Every other SQLSTATE is a statement PostgreSQL refused for good (bad data, a missing
 * table, permissions): sending it again changes nothing.
 */
export const RETRYABLE_SQLSTATES: ReadonlySet<string> = new Set([
  '08000', // connection_exception
  '08003', // connection_does_not_exist
  '08006', // connection_failure
  '08001', // sqlclient_unable_to_establish_sqlconnection
  '08004', // sqlserver_rejected_establishment_of_sqlconnection
  '57P01', // admin_shutdown: pg_terminate_backend, a fast or smart shutdown
  '57P02', // crash_shutdown: another backend crashed, an immediate shutdown
  '57P03', // cannot_connect_now: starting up or shutting down
  '57014', // query_canceled: statement_timeout, pg_cancel_backend
  '53000', // insufficient_resources
  '53100', // disk_full
  '53200', // out_of_memory
  '53300', // too_many_connections
  '40001', // serialization_failure
  '40P01', // deadlock_detected
  '55P03', // lock_not_available
  '25006', // read_only_sql_transaction: a failover under way
  '58000', // system_error
  '58030', // io_error
]);

/**
 * SQLSTATEs PostgreSQL sends in place of a statement's reply when it ends the whole session: sent
 * after the statement may have committed (the commit of an implicit transaction comes at Sync, and
 * the FATAL can follow it), so they say nothing about what happened to it.
 */
const SESSION_ENDED_SQLSTATES: ReadonlySet<string> = new Set([
  '57P01',
  '57P02',
  '08000',
  '08003',
  '08006',
]);

/** Node's own errors for a connection that could not be made: nothing was sent on it. */
const NOT_CONNECTED_CODES: ReadonlySet<string> = new Set([
  'ECONNREFUSED',
  'ENOENT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EAI_AGAIN',
  'ENOTFOUND',
]);

function codeOf(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null | undefined)?.code;
  return typeof code === 'string' ? code : undefined;
}

/** A SQLSTATE: five characters of digits and capitals (Node's error codes start with E…). */
function isSqlState(code: string): boolean {
  return /^[0-9A-Z]{5}$/.test(code) && !code.startsWith('E');
}

/**
 * A Citus coordinator's report that its connection to a worker broke under the statement: the
 * proxy's own session to the coordinator is still open, and the coordinator opens a new connection
 * to the worker for the next statement. Citus says so as an ERROR, not a FATAL, in one of two
 * ways: the worker's own session-ending SQLSTATE passed on (57P01 when the worker's backend was
 * terminated), or XX000 (internal_error) with a message about the connection ("failure on
 * connection marked as essential: host:port", "connection to the remote node … failed"). Plain
 * PostgreSQL sends neither: it ends the session with a FATAL.
 */
export function isRelayedConnectionFailure(error: unknown): boolean {
  const code = codeOf(error);
  if (code === undefined) return false;
  const { severity, message } = error as { severity?: unknown; message?: unknown };
  if (severity !== 'ERROR') return false;
  if (SESSION_ENDED_SQLSTATES.has(code)) return true;
  return code === 'XX000' && typeof message === 'string' && /\bconnection\b/i.test(message);
}

/**
 * Whether a failed write may succeed when sent again: a connection-level failure (no SQLSTATE: the
 * connection broke, could not be made, or the pool had none free), a SQLSTATE in
 * RETRYABLE_SQLSTATES, or a worker connection a Citus coordinator lost.
 */
export function isRetryableWriteError(error: unknown): boolean {
  const code = codeOf(error);
  if (code === undefined || !isSqlState(code)) return true;
  return RETRYABLE_SQLSTATES.has(code) || isRelayedConnectionFailure(error);
}

/**
 * Whether a failed statement may have committed: its connection broke after it was sent, so its
 * reply was lost — between the proxy and PostgreSQL, or between a Citus coordinator and the worker
 * that ran the statement (a write to one shard commits on the worker alone). Not when PostgreSQL
 * answered it with an error (the implicit transaction rolled back), nor when no connection was had
 * (the pool had none free, the server refused it).
 */
export function mayHaveCommitted(error: unknown): boolean {
  if (isPoolExhausted(error)) return false;
  const code = codeOf(error);
  if (code === undefined) return true;
  if (NOT_CONNECTED_CODES.has(code)) return false;
  if (!isSqlState(code)) return true;
  return SESSION_ENDED_SQLSTATES.has(code) || isRelayedConnectionFailure(error);
}
