// Why the store's database cannot be used, said so that a person can fix it: which server, what it
// answered, and which setting to look at. Startup waits for a server that refuses connections (it
// may still be starting: docker-compose order); everything else fails at once with a hint.
import { maskPassword } from './masked-url';
import { SQLSTATE } from './sqlstate';
import { storeTlsProblem } from './tls-problem';
import type { StoreTlsConfig } from '../config/types';
import { StartupError } from '../startup-error';

/** The error's code, looking inside an AggregateError (`localhost` tried on ::1 and 127.0.0.1). */
function codeOf(error: unknown): unknown {
  const code = (error as { code?: unknown } | undefined)?.code;
  if (code !== undefined) return code;
  const inner = (error as { errors?: unknown[] } | undefined)?.errors?.[0];
  return (inner as { code?: unknown } | undefined)?.code;
}

/** Worth waiting for: refused, not resolvable yet, or starting/restarting. */
export function isConnectionError(error: unknown): boolean {
  const code = codeOf(error);
  if (
    code === 'ECONNREFUSED' ||
    code === 'ENOTFOUND' ||
    code === 'EAI_AGAIN' ||
    code === 'ECONNRESET' ||
    code === 'ETIMEDOUT' ||
    code === 'EHOSTUNREACH'
  )
    return true;
  if (
    code === SQLSTATE.CANNOT_CONNECT_NOW ||
    code === SQLSTATE.ADMIN_SHUTDOWN ||
    code === SQLSTATE.CRASH_SHUTDOWN
  ) {
    return true; // starting up, or restarting
  }
  return /timeout exceeded when trying to connect|Connection terminated/i.test(reasonOf(error));
}

/** `ECONNREFUSED 127.0.0.1:5432`, or the server's own message: one line, no stack. */
export function reasonOf(error: unknown): string {
  const message = (error as Error | undefined)?.message;
  if (message) return message.split('\n')[0]!;
  const code = codeOf(error);
  return code === undefined ? String(error) : String(code);
}

/** Where we tried to connect, password masked. */
export function serverOf(url: string): string {
  return maskPassword(url);
}

const HINT = 'check DATABASE_URL (or store.url), or unset both to use the embedded PostgreSQL';

/**
 * The error startup ends with — what was tried, what happened, what to do — for the failures a
 * person fixes in settings; undefined for anything else (a bug keeps its stack).
 */
export function databaseStartupError(
  error: unknown,
  url: string,
  waitedMs: number,
  tls?: StoreTlsConfig,
): StartupError | undefined {
  const where = `PostgreSQL at ${serverOf(url)}`;
  const code = codeOf(error);
  const reason = reasonOf(error);
  const tlsProblem = storeTlsProblem(error, tls, where);
  if (tlsProblem !== undefined) return new StartupError(tlsProblem, { exitCode: 2, cause: error });
  let message: string;
  if (isConnectionError(error)) {
    const waited = waitedMs >= 1_000;
    message = `cannot reach ${where}${waited ? ` after waiting ${Math.round(waitedMs / 1000)} s` : ''} (${reason}): is the server running, and are host and port right? ${HINT}${waited ? '; IDEMPOTENCY_PROXY_DB_WAIT sets how many seconds to wait' : ''}`;
  } else if (code === SQLSTATE.INVALID_PASSWORD || code === SQLSTATE.INVALID_AUTHORIZATION) {
    message = `${where} refused the login (${reason}): fix the user or password in DATABASE_URL (or store.url)`;
  } else if (code === SQLSTATE.INVALID_CATALOG_NAME) {
    message = `${where}: ${reason}; create it (createdb) or name an existing database in DATABASE_URL (or store.url)`;
  } else {
    return undefined;
  }
  return new StartupError(message, { cause: error });
}

/**
 * Migrating as a role that may not create (or alter) the table: what to do instead of a stack.
 * Undefined for any other error.
 */
export function migrationRefusedError(error: unknown): StartupError | undefined {
  if (codeOf(error) !== SQLSTATE.INSUFFICIENT_PRIVILEGE) return undefined;
  return new StartupError(
    `PostgreSQL refused to migrate the store's table (${reasonOf(error)}): the role in DATABASE_URL (or store.url) must own the table or be allowed to create it in the schema; or run \`idempotency-proxy migrate\` as such a role and serve with store.migrate: false (docs/operations.md#database-roles)`,
    { cause: error },
  );
}
