// RFC 6901 JSON pointers, for key.body: where a key sent inside a JSON body (or an MCP route's
// JSON-RPC message) is. The config schema has already checked the syntax; this unescapes the
// reference tokens once, at compile time.

/** '/meta/idempotency~1key' → ['meta', 'idempotency/key'] (RFC 6901 §4: "~1" first, then "~0"). */
export function parseJsonPointer(pointer: string): string[] {
  if (!pointer.startsWith('/'))
    throw new TypeError(`not a JSON pointer: ${JSON.stringify(pointer)}`);
  return pointer
    .slice(1)
    .split('/')
    .map((token) => token.replaceAll('~1', '/').replaceAll('~0', '~'));
}

/**
 * The value at `tokens` in a parsed JSON value, or undefined when a member or element is absent.
 * An array is indexed by a token of decimal digits without leading zeros (RFC 6901 §4); "-" (the
 * element after the last) never exists here.
 */
export function valueAtPointer(value: unknown, tokens: readonly string[]): unknown {
  for (const token of tokens) {
    if (Array.isArray(value)) {
      if (!/^(?:0|[1-9][0-9]*)$/.test(token)) return undefined;
      value = value[Number(token)];
    } else if (typeof value === 'object' && value !== null && Object.hasOwn(value, token)) {
      value = (value as Record<string, unknown>)[token];
    } else return undefined;
  }
  return value;
}
