// Table names come from config and end up in SQL text (identifiers cannot be parameters), so they are
// checked against a plain-identifier pattern here as well as in the config schema, and always quoted.
const PLAIN_IDENTIFIER = /^[a-z_][a-z0-9_]{0,49}$/;

export function quoteTableName(name: string): string {
  if (!PLAIN_IDENTIFIER.test(name)) {
    throw new Error(`invalid table name ${JSON.stringify(name)}: expected a plain SQL identifier`);
  }
  return `"${name}"`;
}
