// SQLSTATE codes the store reacts to by name (PostgreSQL Appendix A).
export const SQLSTATE = {
  UNIQUE_VIOLATION: '23505',
  UNDEFINED_TABLE: '42P01',
  QUERY_CANCELED: '57014',
  ADMIN_SHUTDOWN: '57P01',
  CRASH_SHUTDOWN: '57P02',
  CANNOT_CONNECT_NOW: '57P03',
} as const;
