// The building blocks of the config schema (schema.ts and the feature blocks beside it): strict
// objects that report unknown keys, numbers and booleans that may be spelled as strings, durations,
// sizes, names, patterns, and the built-in idempotency defaults.
import { z } from 'zod';
import {
  DURATION_HINT,
  DURATION_PATTERN,
  MAX_TIMER_MS,
  SIZE_HINT,
  SIZE_PATTERN,
  tryParseDurationMs,
} from './units';
import { parseAddressOrCidr } from './addresses';

export const knownKeys = new WeakMap<object, readonly string[]>();

/** Keys a strict object accepts, for "did you mean" hints on unknown keys. */
export function knownKeysOf(schema: unknown): readonly string[] | undefined {
  return typeof schema === 'object' && schema !== null ? knownKeys.get(schema) : undefined;
}

export function strict<T extends z.core.$ZodLooseShape>(shape: T, what: string) {
  const schema = z.strictObject(shape, {
    error: (issue) => (issue.code === 'invalid_type' ? `expected a mapping of ${what}` : undefined),
  });
  knownKeys.set(schema, Object.keys(shape));
  return schema;
}

export const toNumber = (v: unknown): unknown =>
  typeof v === 'string' && /^\d+$/.test(v) ? Number(v) : v;
export const toBoolean = (v: unknown): unknown => (v === 'true' ? true : v === 'false' ? false : v);

/** A block that `true` (or "true") switches on with its defaults: `true` reads as `{}`. */
export const orFlag = <T extends z.ZodType>(block: T) =>
  z.preprocess((v: unknown) => (toBoolean(v) === true ? {} : v), block);

export function integer(
  min: number,
  max: number,
  hint = `expected an integer from ${min} to ${max}`,
) {
  return z.preprocess(toNumber, z.int({ error: hint }).min(min).max(max));
}
// A `title` on a building block names its type in config/README.md (and in editors' hovers):
// "duration" says more than the pattern behind it.
export const bool = z.preprocess(toBoolean, z.boolean({ error: 'expected true or false' }));
export const port = integer(0, 65535, 'expected a port number from 0 to 65535').meta({
  title: 'port',
});

export function pattern(regex: RegExp, hint: string, title: string) {
  return z.string({ error: hint }).regex(regex, { error: hint }).meta({ title });
}

export function duration(options: { positive?: boolean; timer?: boolean }) {
  const ms = (text: string) => tryParseDurationMs(text) ?? 0;
  return z
    .string({ error: DURATION_HINT })
    .regex(DURATION_PATTERN, { error: DURATION_HINT, abort: true })
    .refine((text) => !options.positive || ms(text) > 0, {
      error: 'expected a duration greater than 0',
      abort: true,
    })
    .refine((text) => !options.timer || ms(text) <= MAX_TIMER_MS, {
      error: 'expected a duration of at most 24d (the longest a Node timer can wait)',
    })
    .meta({ title: 'duration' });
}
/** Durations that end up in setTimeout: > 0 and within Node's timer range. */
export const timer = duration({ positive: true, timer: true });
export const MAX_WORKERS = 1024;
export const WORKERS_HINT = `expected "auto" (one per core) or a number of processes from 1 to ${MAX_WORKERS}`;
export const size = pattern(SIZE_PATTERN, SIZE_HINT, 'size');

// RFC 9110 §5.1: field names are tokens.
export const TOKEN = "[!#$%&'*+.^_`|~0-9A-Za-z-]+";
export const BODY_FIELD = String.raw`body(?:\.[^.\s]+)+`;
export const headerName = pattern(
  new RegExp(`^${TOKEN}$`),
  'expected an HTTP header name like "Idempotency-Key"',
  'header name',
);
export const bodyField = pattern(
  new RegExp(`^${BODY_FIELD}$`),
  'expected a body field like "body.sent_at"',
  'body field',
);
// A claim name is any JSON member name without whitespace: `sub`, `org_id`, or a namespaced one
// like `https://example.com/tenant` (Auth0's custom claims).
export const tenantPart = pattern(
  new RegExp(`^(?:header:${TOKEN}|jwt:\\S+)$`),
  'expected "jwt:<claim>" (a claim of the verified bearer token, like "jwt:sub") or "header:<name>"',
  'jwt:<claim> or header:<name>',
);
// RFC 6901: "/" then reference tokens, "~" only as "~0" or "~1". The whole document ("") is no key.
export const jsonPointer = pattern(
  /^(?:\/(?:[^~]|~[01])*)+$/,
  'expected a JSON pointer (RFC 6901) like "/meta/idempotency_key": "/" before each member name, "~" written "~0" and "/" inside a name "~1"',
  'JSON pointer',
);
export const requestPart = pattern(
  new RegExp(`^(?:method|path|query|body|${BODY_FIELD}|header:${TOKEN}|query\\.[^\\s&=#]+)$`),
  'expected a request part: method, path, query, body, body.<field>, header:<name> or query.<name>',
  'request part',
);
export const parts = (what: string) =>
  z.array(requestPart).min(1, { error: `expected at least one ${what}` });

// Names end up in admin URLs (/keys/{route}/{key}) and logs: keep them plain.
export const NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;
export const name = (what: string) =>
  pattern(
    NAME_PATTERN,
    `expected ${what} of letters, digits, ".", "_" or "-", starting with a letter or digit`,
    'name',
  );

export const HTTP_METHODS = ['GET', 'HEAD', 'OPTIONS', 'POST', 'PUT', 'PATCH', 'DELETE'] as const;
export const method = z
  .enum([...HTTP_METHODS, ...HTTP_METHODS.map((m) => m.toLowerCase())], {
    error: `expected an HTTP method (${HTTP_METHODS.join(', ')})`,
  })
  .meta({ title: 'method' });

// As http/router.ts matches them: literal segments (a ":" only inside, as in /v1/items:batch),
// `:param` segments, or a final `/**` (which also matches the prefix itself).
export const LITERAL = String.raw`[^/:*?#\s][^/*?#\s]*`;
export const SEGMENT = String.raw`(?:${LITERAL}|:[A-Za-z_][A-Za-z0-9_]*)`;
export const pathPattern = pattern(
  new RegExp(`^(?:/|(?:/${SEGMENT})+/?|(?:/${SEGMENT})*/\\*\\*)$`),
  'expected a path starting with "/": literal segments, ":param" segments, or a final "/**"',
  'path pattern',
);
export const formatName = pattern(
  /^[a-z0-9]{1,16}$/,
  'expected a format suffix like "json" (lower-case letters and digits, no dot)',
  'format',
);
export const pathPrefix = pattern(
  new RegExp(`^(?:/${LITERAL})+$`),
  'expected a path prefix like "/mail" (literal segments, no trailing "/")',
  'path prefix',
);
export const LABEL = '[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?';
export const hostName = pattern(
  new RegExp(`^(?:\\[[0-9A-Fa-f:.]+\\]|${LABEL}(?:\\.${LABEL})*)$`),
  'expected a host name without a port, like "mail.internal"',
  'host name',
);
// No number-to-string coercion: YAML reads `token: 0123` as 123, silently changing the secret.
export const quotedText = z
  .string({ error: 'expected a string (quote it if it looks like a number)' })
  .meta({ title: 'string' });
export const TABLE_HINT =
  'expected a plain SQL identifier: lower-case letters, digits and "_", not starting with a digit';
export const TABLE_LENGTH_HINT =
  'expected at most 50 characters (the store appends "_migrations" etc.)';
export const listenHost = pattern(
  /^[^\s/]+$/,
  'expected an address to listen on, like "0.0.0.0" or "127.0.0.1"',
  'address',
);
export const storeUrl = pattern(
  /^(?:$|postgres(?:ql)?:\/\/)/,
  'expected a postgres:// URL, or empty for the embedded PostgreSQL',
  'postgres:// URL',
);

export const STATUS_HINT = 'expected a status class like "2xx" or a status code from 100 to 599';
export const status = z
  .int({ error: 'expected an HTTP status code from 100 to 599' })
  .min(100)
  .max(599)
  .meta({ title: 'status' });
export const statusClass = z
  .union([pattern(/^[1-5]xx$/, STATUS_HINT, 'status class'), status], { error: STATUS_HINT })
  .meta({ title: 'status or class' });

export const ADDRESS_HINT = 'expected an IP address or CIDR, like "10.0.0.0/8" or "::1"';
export const addressOrCidr = z
  .string({ error: ADDRESS_HINT })
  .refine((text) => parseAddressOrCidr(text) !== undefined, { error: ADDRESS_HINT })
  .meta({ title: 'address or CIDR' });

// Only the scheme here (it also lands in the JSON Schema); the compiler parses and splits the URL.
export const upstreamUrl = pattern(
  /^https?:\/\/[^/?#]/i,
  'expected an http:// or https:// URL',
  'http(s):// URL',
);

/**
 * Built-in idempotency defaults, written as in YAML. The `defaults:` block is merged over
 * these, and each route's block over that.
 */
export const IDEMPOTENCY_DEFAULTS = {
  key: { header: 'Idempotency-Key', forward: 'raw', required: true, maxLength: 255 },
  forwardKeyAs: 'Idempotency-Key',
  ttl: '24h',
  lockTimeout: '60s',
  unknownOutcome: 'fail',
  onConcurrent: 'reject',
  waitTimeout: '10s',
  fingerprint: { parts: ['method', 'path', 'query', 'body'], ignore: [] as string[] },
  store: ['2xx', '3xx', '4xx', '5xx'] as (string | number)[],
  release: [408, 425, 429, 503],
  maxRequestBytes: '1mb',
  maxResponseBytes: '8mb',
  replayedHeader: 'Idempotent-Replayed',
  enforce: true,
  allowSafeMethods: false,
  replaySetCookie: false,
  logKey: 'plain',
  maxWaitersPerKey: 1000,
  // Not chunked by default: Node's own writeHead + end(body) sends a plain answer chunked.
  streams: { contentTypes: ['text/event-stream', 'application/x-ndjson'], chunked: false },
  // Headers that answer one caller's credentials: a later caller replaying the record must not get
  // another's challenge or nonce. Set-Cookie has its own switch (replaySetCookie).
  dropReplayHeaders: ['www-authenticate', 'authentication-info', 'proxy-authentication-info'],
} as const;

export const D = IDEMPOTENCY_DEFAULTS;

/**
 * An optional field with editor help and its built-in default (shown by editors; applied in
 * the compiler, not here). Idempotency fields stay optional so a route's block can be merged field
 * by field over `defaults`.
 */
export function opt<T extends z.ZodType>(schema: T, description: string, fallback?: unknown) {
  return schema
    .optional()
    .meta(fallback === undefined ? { description } : { description, default: fallback });
}
