// The `_method` parameter that Rack::MethodOverride (Rails, Sinatra), Laravel and Symfony read to run
// a POST as another method: where it is found in a query or a form, urlencoded or multipart, or (for
// Laravel, whose input is the JSON body when there is one) a JSON object, and the same request with
// it removed. Pure: strings and buffers in, methods and rewritten bodies out.
//
// Names are read the way those frameworks read them: form-decoded (`+` and `%XX`), and also as PHP
// registers them (leading spaces dropped, " ", "." and "[" turned into "_"), so `.method` and
// `%5Fmethod` count as `_method` too. Values are upper-cased, as all of them do.

/** The `_method` values found (upper-case, in order), and the input without them. */
export interface MethodParams<T> {
  readonly methods: readonly string[];
  readonly without: T;
}

const PARAM = '_method';

/** A name as Rack or PHP would register it is `_method`. */
function isMethodName(decoded: string): boolean {
  if (decoded === PARAM) return true;
  return decoded.replace(/^ +/, '').replace(/[ .[]/g, '_') === PARAM;
}

function formDecode(text: string): string {
  const spaced = text.replace(/\+/g, ' ');
  try {
    return decodeURIComponent(spaced);
  } catch {
    return spaced;
  }
}

/** In a query string or an application/x-www-form-urlencoded body (pairs joined by "&"). */
export function formMethodParams(text: string): MethodParams<string> {
  // A body without the name spelled in any of its forms is left alone without splitting it.
  if (!/method|%/i.test(text)) return { methods: [], without: text };
  const methods: string[] = [];
  const kept: string[] = [];
  for (const pair of text.split('&')) {
    const equals = pair.indexOf('=');
    const name = formDecode(equals === -1 ? pair : pair.slice(0, equals));
    if (!isMethodName(name)) kept.push(pair);
    else methods.push(formDecode(equals === -1 ? '' : pair.slice(equals + 1)).toUpperCase());
  }
  return methods.length === 0 ? { methods, without: text } : { methods, without: kept.join('&') };
}

/** A top-level string `_method` in a JSON object (Laravel reads it); nothing for other bodies. */
export function jsonMethodParams(body: Buffer): readonly string[] {
  if (!body.includes(PARAM)) return [];
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch {
    return [];
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return [];
  const value = (parsed as Record<string, unknown>)[PARAM];
  return typeof value === 'string' ? [value.toUpperCase()] : [];
}

/**
 * In a multipart/form-data body: the `_method` fields (not files), and the body without their
 * parts. Undefined when the body is not multipart the proxy can read (no boundary, no closing
 * delimiter): a form the proxy cannot read is not passed on as if it had no `_method`.
 */
export function multipartMethodParams(
  body: Buffer,
  contentType: string,
): MethodParams<Buffer> | undefined {
  const boundary = /;\s*boundary=(?:"([^"]{1,70})"|([^;\s"]{1,70}))/i.exec(contentType);
  if (boundary === null) return undefined;
  const delimiter = Buffer.from(`--${boundary[1] ?? boundary[2]!}`, 'latin1');
  // Every delimiter that starts a line; the CRLF before one ends the part before it.
  const starts: number[] = [];
  for (let at = body.indexOf(delimiter); at !== -1; at = body.indexOf(delimiter, at + 1)) {
    if (at === 0 || (body[at - 2] === 0x0d && body[at - 1] === 0x0a)) starts.push(at);
  }
  const last = starts.at(-1);
  if (last === undefined || body[last + delimiter.length] !== 0x2d) return undefined;
  if (body[last + delimiter.length + 1] !== 0x2d) return undefined;
  const methods: string[] = [];
  const dropped: [number, number][] = [];
  for (let i = 0; i + 1 < starts.length; i++) {
    const partStart = body.indexOf('\r\n', starts[i]!, 'latin1') + 2;
    const partEnd = starts[i + 1]! - 2;
    const headEnd = body.indexOf('\r\n\r\n', partStart, 'latin1');
    if (partStart < 2 || headEnd === -1 || headEnd > partEnd) return undefined;
    const head = body.subarray(partStart, headEnd).toString('latin1');
    const disposition = /^content-disposition:(.*)$/im.exec(head)?.[1] ?? '';
    if (/;\s*filename\*?=/i.test(disposition)) continue;
    const name = /;\s*name=(?:"([^"]*)"|([^;\s]*))/i.exec(disposition);
    if (name === null || !isMethodName(name[1] ?? name[2]!)) continue;
    methods.push(
      body
        .subarray(headEnd + 4, partEnd)
        .toString('utf8')
        .toUpperCase(),
    );
    dropped.push([starts[i]!, starts[i + 1]!]);
  }
  if (dropped.length === 0) return { methods, without: body };
  const kept: Buffer[] = [];
  let from = 0;
  for (const [start, end] of dropped) {
    kept.push(body.subarray(from, start));
    from = end;
  }
  kept.push(body.subarray(from));
  return { methods, without: Buffer.concat(kept) };
}

/** The kind of body a framework reads `_method` from, by Content-Type; undefined for the rest. */
export function methodBodyKind(
  contentType: string | undefined,
): 'form' | 'multipart' | 'json' | undefined {
  if (contentType === undefined) return undefined;
  const type = contentType.split(';', 1)[0]!.trim().toLowerCase();
  if (type === 'application/x-www-form-urlencoded') return 'form';
  if (type === 'multipart/form-data') return 'multipart';
  if (type === 'application/json' || type.endsWith('+json')) return 'json';
  return undefined;
}
