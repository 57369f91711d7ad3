// A config problem at a YAML path, before it has a line and column: what the schema checks, the
// cross-field checks (compiler/compile.ts) and the certificate files (tls-files.ts) report, and
// compiler/load.ts places in the file.

export type IssuePath = readonly (string | number)[];

/** A problem at a YAML path; `at: 'key'` points at the key itself (for keys that should not be there). */
export interface PathIssue {
  readonly path: IssuePath;
  readonly message: string;
  readonly at?: 'key' | 'value';
}

/** `routes[2].idempotency.ttl`; keys that are not plain names are quoted: `upstreams["a b"]`. */
export function formatPath(segments: IssuePath): string {
  let out = '';
  for (const segment of segments) {
    if (typeof segment === 'number') out += `[${segment}]`;
    else if (/^[A-Za-z_$][\w$-]*$/.test(segment)) out += out === '' ? segment : `.${segment}`;
    else out += `[${JSON.stringify(segment)}]`;
  }
  return out;
}
