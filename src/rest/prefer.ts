// The Prefer request header (RFC 7240) as far as respond-async reads it: the `respond-async`
// preference, and `wait` (the seconds the client would rather not wait beyond).
//
//   Prefer: respond-async, wait=10      Prefer: wait=5;foo, respond-async     (names: any case)

export interface AsyncPreference {
  /** The client's `wait`, when it sent one that reads as whole seconds. */
  readonly waitSeconds?: number;
}

/** The respond-async preference in the Prefer header lines, or undefined when it was not sent. */
export function preferredAsync(header: string | string[] | undefined): AsyncPreference | undefined {
  if (header === undefined) return undefined;
  let respondAsync = false;
  let waitSeconds: number | undefined;
  for (const line of Array.isArray(header) ? header : [header]) {
    for (const preference of line.split(',')) {
      // Parameters after `;` belong to the preference and are ignored here (§2).
      const token = preference.split(';')[0]!.trim();
      const equals = token.indexOf('=');
      const name = (equals === -1 ? token : token.slice(0, equals)).trim().toLowerCase();
      const value =
        equals === -1
          ? ''
          : token
              .slice(equals + 1)
              .trim()
              .replace(/^"(.*)"$/, '$1');
      if (name === 'respond-async') respondAsync = true;
      // The first of a repeated preference counts (§2).
      else if (name === 'wait' && waitSeconds === undefined && /^\d{1,9}$/.test(value))
        waitSeconds = Number(value);
    }
  }
  return respondAsync ? { waitSeconds } : undefined;
}
