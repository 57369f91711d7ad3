// The key store's statements and how they are sent: each one built for where the table lives (one
// PostgreSQL, or a Citus distributed table) and named by a digest of its text, so it is parsed and
// planned once per connection; and the fallback for a transaction pooler (PgBouncer) that moves a
// session between server connections, where a named statement does not survive: from then on every
// statement goes unnamed.
import { createHash } from 'node:crypto';
import type { Pool, QueryConfig, QueryResult, QueryResultRow } from 'pg';
import { SQLSTATE } from '../../db/sqlstate';
import { buildStatements, claimStatement, completeStatement } from './statements';

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
export interface Layout {
  readonly distributed: boolean;
  readonly sql: Statements;
  readonly names: Record<keyof Statements, string>;
  /** On Citus: a batch's claims, or completions, as that many VALUES rows (statements.ts). */
  readonly rows: {
    readonly claim: (count: number) => { readonly name: string; readonly text: string };
    readonly complete: (count: number) => { readonly name: string; readonly text: string };
  };
}

/** Each batch size's statement, built and named the first time that size is sent. */
function bySize(kind: string, build: (count: number) => string) {
  const built = new Map<number, { name: string; text: string }>();
  return (count: number): { name: string; text: string } => {
    let statement = built.get(count);
    if (!statement) {
      const text = build(count);
      statement = { name: statementName(`${kind}_${count}`, text), text };
      built.set(count, statement);
    }
    return statement;
  };
}

export function layout(tableName: string, distributed: boolean): Layout {
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
      completePartial: statementName('complete_partial', sql.completePartial),
      release: statementName('release', sql.release),
      takeOver: statementName('take_over', sql.takeOver),
      settleUnknown: statementName('settle_unknown', sql.settleUnknown),
      replaceUnknown: statementName('replace_unknown', sql.replaceUnknown),
      stillClaimed: statementName('still_claimed', sql.stillClaimed),
      peek: statementName('peek', sql.peek),
      completedWith: statementName('completed_with', sql.completedWith),
      flushCounters: statementName('flush_counters', sql.flushCounters),
    },
    rows: {
      claim: bySize('claim_rows', (count) => claimStatement(tableName, count)),
      complete: bySize('complete_rows', (count) => completeStatement(tableName, count, true)),
    },
  };
}

/** One call of a named statement (rowMode: 'array' returns rows as arrays). */
export type Statement = QueryConfig & { name: string; rowMode?: 'array' };

/**
 * Sends one statement, named while named statements work. The first time one did not survive
 * between transactions (a transaction pooler), every later call goes unnamed, and that one is sent
 * again unnamed: it failed before it ran. Unnamed statements are parsed within the call's own
 * implicit transaction, so they work on any server connection.
 */
export class StatementSender {
  constructor(
    private readonly pool: Pool,
    /** False once statements are sent unnamed (configured so, or a named one did not survive). */
    public named: boolean,
    private readonly onNamedStatementsLost: ((error: Error) => void) | undefined,
  ) {}

  async send<R extends QueryResultRow | unknown[]>(
    query: Statement,
  ): Promise<QueryResult<R & QueryResultRow>> {
    if (!this.named) return this.pool.query<R & QueryResultRow>(unnamed(query));
    try {
      return await this.pool.query<R & QueryResultRow>(query);
    } catch (error) {
      if (!namedStatementLost(error)) throw error;
      if (this.named) {
        this.named = false;
        this.onNamedStatementsLost?.(error as Error);
      }
      return this.pool.query<R & QueryResultRow>(unnamed(query));
    }
  }
}

/** The statement sent unnamed: parsed within its own call (see StatementSender). */
function unnamed({ text, values, rowMode }: Statement): QueryConfig {
  return rowMode === undefined ? { text, values } : ({ text, values, rowMode } as QueryConfig);
}
