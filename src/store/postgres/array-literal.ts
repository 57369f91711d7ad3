// A batch's columns as PostgreSQL array literals, for the statements that unnest them
// (statements.ts, shape 'batch'). pg would write them too, but quoting every element and escaping
// it with two regular expressions, numbers and flags included (its arrayString): a batch of claims
// and completions spent ~2.8 KB of garbage per new key there, the most of any one function
// (a sampling heap profile under the bench's new keys). Here an element is escaped only when it
// holds a quote or a backslash (a completion's headers, as JSON, do; JSON.stringify escapes them),
// numbers and flags are written bare, and each column is written straight from the batch's rows.

/** What a column of a batch holds: text, a number, a flag, bytes, or NULL. */
export type ArrayElement = string | number | boolean | Buffer | null;

/**
 * Each column of `rows` (rows[r][c]) as one array literal: `{"a","b"}`, `{1,2}`, `{t,f}`,
 * `{\\x00ff}` (bytea's hex input), NULL as `NULL`.
 */
export function columnLiterals(rows: readonly (readonly ArrayElement[])[]): string[] {
  const columns = rows[0]?.length ?? 0;
  const literals = new Array<string>(columns);
  for (let c = 0; c < columns; c++) {
    let literal = '{';
    for (let r = 0; r < rows.length; r++) {
      if (r > 0) literal += ',';
      literal += element(rows[r]![c]);
    }
    literals[c] = literal + '}';
  }
  return literals;
}

/**
 * Text in double quotes, where only a quote and a backslash need a backslash before them.
 * JSON.stringify writes exactly that, in native code, for text without control characters or
 * surrogates (which it would write as escapes array input does not know): a completion's headers,
 * JSON themselves, are such text, and quoted so in a third of a regular expression's time.
 */
function quoted(text: string): string {
  if (text.indexOf('"') === -1 && text.indexOf('\\') === -1) return '"' + text + '"';
  if (!JSON_ESCAPES_OTHERWISE.test(text)) return JSON.stringify(text);
  return '"' + text.replace(/["\\]/g, '\\$&') + '"';
}

/** Characters JSON.stringify writes as escapes: control characters and (lone) surrogates. */
// eslint-disable-next-line no-control-regex -- control characters are what it looks for
const JSON_ESCAPES_OTHERWISE = /[\u0000-\u001f\ud800-\udfff]/;

/** One element as array input reads it. */
function element(value: ArrayElement | undefined): string {
  switch (typeof value) {
    case 'string':
      return quoted(value);
    case 'number':
      if (!Number.isFinite(value)) throw new TypeError(`an array element is ${value}`);
      return String(value);
    case 'boolean':
      return value ? 't' : 'f';
    case 'undefined':
      return 'NULL';
    default:
      if (value === null) return 'NULL';
      if (!Buffer.isBuffer(value)) throw new TypeError('an array element is an object');
      // Unquoted, `\\` is one backslash: bytea reads `\x` and the hex digits.
      return '\\\\x' + value.toString('hex');
  }
}
