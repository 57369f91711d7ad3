// UUIDv5 (RFC 9562 §5.5): SHA-1 over the namespace's 16 bytes followed by the name's bytes, with the
// version and variant bits set. node:crypto only, so the client helper carries no dependency.
import { createHash } from 'node:crypto';

/** RFC 9562 §6.6 namespace for fully qualified domain names (`6ba7b810-9dad-11d1-80b4-00c04fd430c8`). */
export const NAMESPACE_DNS = '6ba7b810-9dad-11d1-80b4-00c04fd430c8';
/** RFC 9562 §6.6 namespace for URLs (`6ba7b811-9dad-11d1-80b4-00c04fd430c8`). */
export const NAMESPACE_URL = '6ba7b811-9dad-11d1-80b4-00c04fd430c8';

const UUID_PATTERN = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** True for a UUID in its 36-character hyphenated form (any version, either case). */
export function isUuid(value: unknown): value is string {
  return typeof value === 'string' && UUID_PATTERN.test(value);
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * True when `text` has no lone UTF-16 surrogate, so it has exactly one UTF-8 encoding. (Node would
 * silently turn a lone surrogate into U+FFFD, making distinct names hash alike; Python refuses them.)
 */
export function isWellFormedText(text: string): boolean {
  return !LONE_SURROGATE.test(text);
}

/**
 * The name-based UUID, version 5, of `name` under `namespace` (RFC 9562 §5.5).
 *
 * Identical to Python's `uuid.uuid5(uuid.UUID(namespace), name)`: a string name is hashed as its
 * UTF-8 bytes. The same inputs give the same UUID in every process, on every machine, forever.
 *
 * @param namespace - a UUID in hyphenated form, e.g. {@link NAMESPACE_DNS} or one of your own.
 * @param name - the name; a string is encoded as UTF-8, bytes are used as they are.
 * @returns the UUID, lower-case and hyphenated, e.g. `886313e1-3b8a-5372-9b90-0c9aee199e5d` for
 *   `uuidV5(NAMESPACE_DNS, 'python.org')`.
 * @throws TypeError when `namespace` is not a UUID, or a string `name` holds a lone surrogate.
 */
export function uuidV5(namespace: string, name: string | Uint8Array): string {
  if (!isUuid(namespace)) {
    throw new TypeError(
      `namespace must be a UUID like "${NAMESPACE_DNS}", got ${JSON.stringify(namespace)}`,
    );
  }
  if (typeof name === 'string' && !isWellFormedText(name)) {
    throw new TypeError('name must be well-formed Unicode: it holds a lone UTF-16 surrogate');
  }
  const hash = createHash('sha1')
    .update(Buffer.from(namespace.replace(/-/g, ''), 'hex'))
    .update(typeof name === 'string' ? Buffer.from(name, 'utf8') : name)
    .digest();
  const bytes = hash.subarray(0, 16);
  bytes[6] = (bytes[6]! & 0x0f) | 0x50; // version 5 in the high nibble of octet 6
  bytes[8] = (bytes[8]! & 0x3f) | 0x80; // variant 10xx (RFC 9562 §4.1) in octet 8
  const hex = bytes.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}
