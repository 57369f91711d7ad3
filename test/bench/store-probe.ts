// The bench's own connection to the store: counts the statements the proxy sends (store round trips),
// reads the server's durability settings, and flips synchronous_commit for the labelled scenario.
//
// Counting, in order of preference:
//   pg_stat_statements   exact: `calls` of every statement in this database, bumped as each one
//                        finishes, minus the bench's own (marked with PROBE_MARK).
//   pg_stat_database     approximate fallback when the extension is not loaded: xact_commit +
//                        xact_rollback (each autocommit statement is one transaction). Backends flush
//                        these counters at most once a second and up to 10 s after going idle, so
//                        every reading waits STATS_FLUSH_WAIT_MS first.
import { Client, type QueryResult, type QueryResultRow } from 'pg';

// pg_stat_statements drops a leading comment from the text it keeps: the mark goes after the first word.
const PROBE_MARK = '/* idempotency-proxy-bench probe */';
const STATS_FLUSH_WAIT_MS = 11_000;

export type CountingMethod = 'pg_stat_statements' | 'pg_stat_database';

export interface StatementCounts {
  readonly total: number;
  /** By statement kind (claim, complete, release, …). */
  readonly byKind: Record<string, number>;
}

export interface ServerSettings {
  readonly serverVersion: string;
  readonly fsync: string;
  readonly synchronousCommit: string;
  readonly walSyncMethod: string;
  readonly sharedBuffers: string;
  readonly maxConnections: string;
}

export class StoreProbe {
  private synchronousCommitChanged = false;
  /** The bench's own statements since opening: transactions too, counted out of the fallback. */
  private probeStatements = 0;

  private constructor(
    private readonly client: Client,
    readonly method: CountingMethod,
    private readonly only: ((query: string) => boolean) | undefined,
  ) {}

  /**
   * `only`: counts just the statements it accepts (on a shared Citus coordinator: the ones of the
   * bench's own table, not other users', Citus' own or its shard queries), the bench's own left out
   * either way.
   */
  static async open(url: string, only?: (query: string) => boolean): Promise<StoreProbe> {
    const client = new Client({ connectionString: url, application_name: 'idempotency-bench' });
    // A server stopping under us (Ctrl-C reaches it too) must fail the next query, not crash the bench.
    client.on('error', () => undefined);
    await client.connect();
    let method: CountingMethod = 'pg_stat_database';
    try {
      await client.query(marked('CREATE EXTENSION IF NOT EXISTS pg_stat_statements'));
      await client.query(marked('SELECT count(*) FROM pg_stat_statements'));
      method = 'pg_stat_statements';
    } catch {
      // Not installable here, or not in shared_preload_libraries: fall back to transactions.
    }
    return new StoreProbe(client, method, only);
  }

  /** Counters now. Under the pg_stat_database fallback this waits for backends to flush first. */
  async read(): Promise<StatementCounts> {
    if (this.method === 'pg_stat_statements') {
      const { rows } = await this.query<{ query: string; calls: string }>(
        `SELECT query, calls::text AS calls FROM pg_stat_statements
          WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`,
      );
      const byKind: Record<string, number> = {};
      let total = 0;
      for (const row of rows) {
        if (row.query.includes(PROBE_MARK) || (this.only && !this.only(row.query))) continue;
        const kind = statementKind(row.query);
        byKind[kind] = (byKind[kind] ?? 0) + Number(row.calls);
        total += Number(row.calls);
      }
      return { total, byKind };
    }
    await new Promise((resolve) => setTimeout(resolve, STATS_FLUSH_WAIT_MS));
    const { rows } = await this.query<{ n: string }>(
      `SELECT (xact_commit + xact_rollback)::text AS n FROM pg_stat_database
        WHERE datname = current_database()`,
    );
    // Every probe statement (this reading included) is a transaction of its own: count them out.
    const total = Number(rows[0]?.n ?? 0) - this.probeStatements;
    return { total, byKind: { transactions: total } };
  }

  async settings(): Promise<ServerSettings> {
    const { rows } = await this.query<{ name: string; setting: string }>(
      `SELECT name, current_setting(name) AS setting FROM pg_settings
        WHERE name IN ('server_version', 'fsync', 'synchronous_commit', 'wal_sync_method',
                       'shared_buffers', 'max_connections')`,
    );
    const get = (name: string): string => rows.find((row) => row.name === name)?.setting ?? '?';
    return {
      serverVersion: get('server_version'),
      fsync: get('fsync'),
      synchronousCommit: get('synchronous_commit'),
      walSyncMethod: get('wal_sync_method'),
      sharedBuffers: get('shared_buffers'),
      maxConnections: get('max_connections'),
    };
  }

  /**
   * Sets the server-wide synchronous_commit (ALTER SYSTEM + reload: open pool connections pick it up
   * before their next statement), or resets it with `null`. Needs a superuser; returns the error
   * message when it cannot.
   */
  async setSynchronousCommit(value: 'on' | 'off' | null): Promise<string | undefined> {
    try {
      await this.query(
        value === null
          ? 'ALTER SYSTEM RESET synchronous_commit'
          : `ALTER SYSTEM SET synchronous_commit = '${value}'`,
      );
      await this.query('SELECT pg_reload_conf()');
      this.synchronousCommitChanged = value !== null;
      // Backends re-read the configuration between statements; give the signal a moment.
      await new Promise((resolve) => setTimeout(resolve, 200));
      return undefined;
    } catch (error) {
      return error instanceof Error ? error.message : String(error);
    }
  }

  /** Runs one of the bench's own statements (seeding): marked, so it is not counted as the proxy's. */
  async execute(text: string): Promise<void> {
    await this.query(text);
  }

  /** Connections the server still accepts: max_connections less reserved and open ones. */
  async connectionRoom(): Promise<number> {
    const { rows } = await this.query<{ room: string }>(
      `SELECT (current_setting('max_connections')::int
               - current_setting('superuser_reserved_connections')::int
               - (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'))::text AS room`,
    );
    return Number(rows[0]?.room ?? 0);
  }

  async dropTable(table: string): Promise<void> {
    await this.query(`DROP TABLE IF EXISTS "${table}"`);
  }

  private query<R extends QueryResultRow>(text: string): Promise<QueryResult<R>> {
    this.probeStatements++;
    return this.client.query<R>(marked(text));
  }

  async close(): Promise<void> {
    if (this.synchronousCommitChanged) await this.setSynchronousCommit(null);
    await this.client.end();
  }
}

const marked = (text: string): string => text.replace(/^(\s*\w+)/, `$1 ${PROBE_MARK}`);

/**
 * Names a statement by what the proxy uses it for (see src/store/postgres/statements.ts), from the text
 * pg_stat_statements keeps — where constants are already replaced by $n, so only the shape counts.
 */
export function statementKind(query: string): string {
  const text = query.replace(/\s+/g, ' ').trim();
  const has = (pattern: RegExp): boolean => pattern.test(text);
  if (has(/\bINSERT INTO\b/i) && has(/\bON CONFLICT\b/i)) return 'claim';
  if (has(/\bUPDATE\b/i) && has(/\battempts = r.attempts \+ d.attempts\b/i))
    return 'flush-counters';
  if (has(/\bUPDATE\b/i) && has(/\breplays = replays \+/i)) return 'settle-unknown';
  if (has(/\bUPDATE\b/i) && has(/\bcompleted_at = now\(\)/i)) return 'complete';
  if (has(/\bDELETE FROM\b/i) && has(/\bprune_after <= now\(\)/i)) return 'prune';
  if (has(/\bDELETE FROM\b/i)) return 'release';
  if (has(/\bUPDATE\b/i) && has(/\bfence = fence \+/i)) return 'take-over';
  if (has(/^LISTEN\b/i)) return 'listen';
  if (has(/\bpg_(try_)?advisory_(un)?lock\b/i)) return 'advisory lock (pruner, migrations)';
  if (has(/^SELECT\b/i) && has(/\bsame_fingerprint\b/i)) return 'peek';
  return text.slice(0, 40);
}
