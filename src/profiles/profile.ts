// A protocol profile (`idempotency.profile`): the idempotency contract a commerce protocol fixes for
// its REST binding, as data. The route compiler (apply.ts) turns it into settings the pipeline
// already reads — key rules, fingerprint parts, stored statuses, error shape, key echo, path scope —
// and `check` (check.ts) refuses a route whose own settings would break it. Nothing on the request
// path asks which profile a route has.
import type { ErrorCode, ErrorShape, ProxyError } from '../errors';
import type { RequestPart } from '../config/types';

export type ProfileName = 'acp' | 'ucp';

/** One rule of a protocol, what the proxy does about it, and where the protocol says it. */
export interface ProfileRule {
  /** The protocol's words, quoted. */
  readonly rule: string;
  readonly proxy: string;
  /** File and heading in the protocol's repository. */
  readonly source: string;
}

export interface Profile {
  readonly name: ProfileName;
  /** The protocol and the version its rules were read from. */
  readonly protocol: string;
  readonly rules: readonly ProfileRule[];
  /** The shortest `ttl` the protocol allows a stored answer. */
  readonly minRetentionMs: number;
  /** The longest key the protocol allows (`key.maxLength` above it is refused); null: no limit of its own. */
  readonly maxKeyLength: number | null;
  /** A key is required on every protected request (`key.required: false` is refused). */
  readonly keyRequired: boolean;
  /** The key comes from its header only (`key.body` is refused). */
  readonly headerKeyOnly: boolean;
  /** What a repeat must match: the fingerprint parts, in place of `fingerprint`. */
  readonly fingerprint: readonly RequestPart[];
  /** Upstream statuses never stored, whatever `store` says: a retry runs fresh. */
  readonly neverStores: (status: number) => boolean;
  /** The `onConcurrent` the protocol needs (ACP: a repeat in flight gets 409); null: the route's own. */
  readonly onConcurrent: 'reject' | null;
  /** The `unknownOutcome` the protocol needs; null: the route's own. */
  readonly unknownOutcome: 'retry' | null;
  /** Response header every answer to a keyed request echoes the key in; null: none. */
  readonly echoKeyAs: string | null;
  /** The replay marker the protocol names (`replayedHeader` set otherwise is refused); null: any. */
  readonly replayedHeader: string | null;
  /** Keys are unique per request path as well as per route and tenant. */
  readonly scopeByPath: boolean;
  readonly errorShape: ErrorShape;
}

export const DAY_MS = 24 * 60 * 60 * 1000;

/**
 * A JSON error body in a protocol's shape: status, `content-type: application/json`, its length,
 * and the Retry-After the error carries (409 in flight, 503).
 */
export function jsonErrorAnswer(
  error: ProxyError,
  status: number,
  fields: Record<string, string>,
): ReturnType<ErrorShape> {
  const body = Buffer.from(JSON.stringify(fields));
  const headers: [string, string][] = [
    ['content-type', 'application/json'],
    ['content-length', String(body.length)],
  ];
  if (error.retryAfterSeconds !== undefined)
    headers.push(['retry-after', String(Math.max(1, Math.ceil(error.retryAfterSeconds)))]);
  return { status, headers, body };
}

/** The idempotency codes both commerce protocols' clients look for; other errors keep ours, in lower case. */
export const IDEMPOTENCY_CODES: Partial<Record<ErrorCode, string>> = {
  IDEMPOTENCY_KEY_MISSING: 'idempotency_key_required',
  IDEMPOTENCY_KEY_INVALID: 'idempotency_key_invalid',
  IDEMPOTENCY_KEY_IN_FLIGHT: 'idempotency_in_flight',
  IDEMPOTENCY_KEY_REUSED: 'idempotency_conflict',
};

export function protocolCode(code: ErrorCode): string {
  return IDEMPOTENCY_CODES[code] ?? code.toLowerCase();
}
