// A key sent inside the JSON body (key.body): the agentic protocols put it there — a request field
// (Square, AEP-155), ACP's `meta.idempotency_key`, UCP's `meta["idempotency-key"]` in an MCP tool
// call. Read only when no key header was sent; the same rules as the header's apply (1 to
// maxLength visible ASCII characters), and the field stays part of the fingerprint like the rest
// of the body.
import type { KeyPolicy } from '../config/types';
import type { ParsedJson } from './canonical-json';
import { valueAtPointer } from './json-pointer';
import { checkKey, type KeyParseResult } from './key';

/** The key at key.body in `parsed`, or undefined when nothing is there (or key.body is not set). */
export function keyInBody(
  parsed: ParsedJson | null,
  key: Pick<KeyPolicy, 'body' | 'bodyPointer' | 'maxLength'>,
): KeyParseResult | undefined {
  if (key.body === null || parsed === null) return undefined;
  const value = valueAtPointer(parsed.value, key.body);
  if (value === undefined) return undefined;
  const name = `The key at ${key.bodyPointer!}`;
  if (typeof value !== 'string')
    return {
      ok: false,
      problem: 'invalid',
      detail: `${name} must be a string; send a unique key, such as a UUID.`,
    };
  return checkKey(value, key.maxLength, name);
}

/** What a request without a key is told on a route that also reads one from the body. */
export function missingKeyDetail(key: Pick<KeyPolicy, 'header' | 'bodyPointer'>): string {
  return `This route needs an idempotency key: send it in the ${headerSpelling(key.header)} header or at ${key.bodyPointer!} in the JSON body, a unique key such as a UUID with each distinct request.`;
}

function headerSpelling(lowerCase: string): string {
  return lowerCase.replace(
    /(^|-)([a-z])/g,
    (_, dash: string, letter: string) => dash + letter.toUpperCase(),
  );
}
