// The request headers the proxy reads on every request, found in one pass over the lines as sent
// (req.rawHeaders). Node builds req.headers only when it is first read, at about 1k instructions a
// header line (lower-casing each name, then a dictionary store): more than the rest of a cached
// replay's reading of the request together. A replay reads these few here and never asks for it;
// forwarding still does, and so does any rule that names other headers.
//
// Each value is the one req.headers would give: the first line of a header Node keeps once
// (Host, Content-Type, Content-Length), the lines joined with ", " for the others.

export interface HeaderFacts {
  /** How many Host lines were sent (RFC 9112 §3.2: exactly one). */
  readonly hostLines: number;
  readonly host: string | undefined;
  readonly contentType: string | undefined;
  readonly contentLength: string | undefined;
  readonly transferEncoding: string | undefined;
  readonly connection: string | undefined;
  /** X-Forwarded-Host, X-Forwarded-Proto or Forwarded was sent. */
  readonly forwarding: boolean;
  /**
   * The method-override headers' values (X-HTTP-Method-Override, X-HTTP-Method, X-Method-Override),
   * every line of all three joined with ",": undefined when none was sent.
   */
  readonly overrides: string | undefined;
}

/** The facts of one request's header lines (name, value, name, value… as Node's rawHeaders). */
export function readHeaderFacts(raw: readonly string[]): HeaderFacts {
  let hostLines = 0;
  let host: string | undefined;
  let contentType: string | undefined;
  let contentLength: string | undefined;
  let transferEncoding: string | undefined;
  let connection: string | undefined;
  let forwarding = false;
  let overrides: string | undefined;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!;
    const value = raw[i + 1]!;
    // By length first: most lines are none of these, and a name is lower-cased only when its
    // length is one of theirs.
    switch (name.length) {
      case 4:
        if (named(name, 'host')) {
          hostLines++;
          host ??= value;
        }
        break;
      case 9:
        if (named(name, 'forwarded')) forwarding = true;
        break;
      case 10:
        if (named(name, 'connection')) connection = joined(connection, value);
        break;
      case 12:
        if (named(name, 'content-type')) contentType ??= value;
        break;
      case 13:
        if (named(name, 'x-http-method')) overrides = listed(overrides, value);
        break;
      case 14:
        if (named(name, 'content-length')) contentLength ??= value;
        break;
      case 16:
        if (named(name, 'x-forwarded-host')) forwarding = true;
        break;
      case 17: {
        const lower = name.toLowerCase();
        if (lower === 'transfer-encoding') transferEncoding = joined(transferEncoding, value);
        else if (lower === 'x-forwarded-proto') forwarding = true;
        else if (lower === 'x-method-override') overrides = listed(overrides, value);
        break;
      }
      case 22:
        if (named(name, 'x-http-method-override')) overrides = listed(overrides, value);
        break;
    }
  }
  return {
    hostLines,
    host,
    contentType,
    contentLength,
    transferEncoding,
    connection,
    forwarding,
    overrides,
  };
}

/** The value of every line named `name` (lower-case), in order; undefined when there is none. */
export function headerLines(raw: readonly string[], name: string): string[] | undefined {
  let values: string[] | undefined;
  for (let i = 0; i < raw.length; i += 2) {
    const line = raw[i]!;
    if (line.length === name.length && named(line, name)) (values ??= []).push(raw[i + 1]!);
  }
  return values;
}

/**
 * A Content-Length value as a number, as Number() reads it. Node's parser lets only digits through,
 * read here one by one: Number() on a string goes through V8's general conversion (~400
 * instructions, twice a protected request). Anything else, or more digits than a double holds
 * exactly, is Number()'s.
 */
export function contentLengthOf(value: string): number {
  if (value.length === 0 || value.length > 15) return Number(value);
  let length = 0;
  for (let i = 0; i < value.length; i++) {
    const digit = value.charCodeAt(i) - 0x30;
    if (digit < 0 || digit > 9) return Number(value);
    length = length * 10 + digit;
  }
  return length;
}

/** A header name as sent, any case, against a lower-case one of the same length. */
function named(name: string, lower: string): boolean {
  return name === lower || name.toLowerCase() === lower;
}

const joined = (before: string | undefined, value: string): string =>
  before === undefined ? value : `${before}, ${value}`;

const listed = (before: string | undefined, value: string): string =>
  before === undefined ? value : `${before},${value}`;
