// The placeholders of a reconcile probe (docs/reconcile.md): `{key}`, the key as forwarded, and
// `{body:/json/pointer}` (REST) or `{arguments:/json/pointer}` (MCP), a value of the original call.
// Pure: parsed once when the config compiles, filled in for each probe.
import { parseJsonPointer, valueAtPointer } from '../idempotency/json-pointer';

export type ValueSource = 'body' | 'arguments';

export type TemplatePart =
  | { readonly kind: 'text'; readonly text: string }
  | { readonly kind: 'key' }
  | { readonly kind: 'value'; readonly pointer: string; readonly tokens: readonly string[] };

const PLACEHOLDER = /\{([^{}]*)\}/g;
const RFC6901 = /^(?:\/(?:[^~]|~[01])*)+$/;

/** The parts of `template`, or what is wrong with it (a message for a config error). */
export function parseTemplate(template: string, source: ValueSource): TemplatePart[] | string {
  const parts: TemplatePart[] = [];
  let last = 0;
  for (const match of template.matchAll(PLACEHOLDER)) {
    if (match.index > last) parts.push({ kind: 'text', text: template.slice(last, match.index) });
    last = match.index + match[0].length;
    const inner = match[1]!;
    if (inner === 'key') {
      parts.push({ kind: 'key' });
      continue;
    }
    if (!inner.startsWith(`${source}:`))
      return `unknown placeholder {${inner}}: expected {key} or {${source}:/json/pointer}`;
    const pointer = inner.slice(source.length + 1);
    if (!RFC6901.test(pointer))
      return `{${inner}}: expected a JSON pointer (RFC 6901) like "/order/id": "/" before each member name, "~" written "~0" and "/" inside a name "~1"`;
    parts.push({ kind: 'value', pointer, tokens: parseJsonPointer(pointer) });
  }
  if (last < template.length) parts.push({ kind: 'text', text: template.slice(last) });
  return parts;
}

/** Why a probe could not be written for a record: the record stays unknown, and the log says this. */
export class TemplateUnfilled extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'TemplateUnfilled';
  }
}

/**
 * The value a placeholder names in the original call (`document`, parsed JSON, or undefined when
 * the body was not JSON); throws TemplateUnfilled when it has none.
 */
export function valueFor(
  part: TemplatePart & { kind: 'value' },
  document: unknown,
  source: ValueSource,
): unknown {
  if (document === undefined)
    throw new TemplateUnfilled(`the original ${source} is not JSON, so it has no ${part.pointer}`);
  const value = valueAtPointer(document, part.tokens);
  if (value === undefined)
    throw new TemplateUnfilled(`the original ${source} has no ${part.pointer}`);
  return value;
}

/** A value as text in a path or a string: scalars only (an object has no one spelling). */
export function scalarText(value: unknown, pointer: string): string {
  if (typeof value === 'string') return value;
  if (typeof value === 'number' || typeof value === 'boolean') return String(value);
  throw new TemplateUnfilled(`${pointer} in the original call is not a string, number or boolean`);
}

/** Fills a template in; `encode` escapes each filled-in value (a path's percent-encoding). */
export function fillTemplate(
  parts: readonly TemplatePart[],
  key: string,
  document: unknown,
  source: ValueSource,
  encode: (text: string) => string = (text) => text,
): string {
  let out = '';
  for (const part of parts) {
    if (part.kind === 'text') out += part.text;
    else if (part.kind === 'key') out += encode(key);
    else out += encode(scalarText(valueFor(part, document, source), part.pointer));
  }
  return out;
}

/** The original body as JSON, or undefined when it is not JSON. */
export function parseDocument(body: Buffer): unknown {
  try {
    return JSON.parse(body.toString('utf8')) as unknown;
  } catch {
    return undefined;
  }
}
