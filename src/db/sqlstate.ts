// SQLSTATE codes the proxy reacts to by name (PostgreSQL Appendix A).
export const SQLSTATE = {
  /** The server is shutting down (e.g. a restart): retry. */
  ADMIN_SHUTDOWN: '57P01',
  CRASH_SHUTDOWN: '57P02',
  /** The server is starting up: retry. */
  CANNOT_CONNECT_NOW: '57P03',
  /** Two batched statements locked rows in opposite orders; one was cancelled: retry its rows alone. */
  DEADLOCK_DETECTED: '40P01',
  /**
   * A named statement this connection prepared is not in the server session (26000), or one of that
   * name already is (42P05): a transaction pooler (PgBouncer in transaction mode) moved the
   * connection to another server session. The statement did not run.
   */
  INVALID_SQL_STATEMENT_NAME: '26000',
  DUPLICATE_PREPARED_STATEMENT: '42P05',
  /** The server is a standby, or the old primary turned read-only after a failover: nothing ran. */
  READ_ONLY_SQL_TRANSACTION: '25006',
  /** Startup stops with a hint rather than retrying: a wrong password, user or database name. */
  INVALID_PASSWORD: '28P01',
  INVALID_AUTHORIZATION: '28000',
  INVALID_CATALOG_NAME: '3D000',
  /** The role may not do it: migrating without CREATE on the schema, or serving without a GRANT. */
  INSUFFICIENT_PRIVILEGE: '42501',
} as const;
