// The one table of errors the proxy itself answers with. Every entry has a stable `code` (documented
// in src/http/README.md's error table) and renders as application/problem+json (RFC 9457) in
// http/problem.ts.

export const ERROR_TABLE = {
  ROUTE_NOT_FOUND: { status: 404, title: 'No route matches this request' },
  REQUEST_TARGET_INVALID: { status: 400, title: 'Request target has no single reading' },
  HOST_INVALID: { status: 400, title: 'Host is missing, repeated or malformed' },
  CONNECTION_HEADER_CONFLICT: {
    status: 400,
    title: 'Connection header names a header the proxy needs',
  },
  METHOD_OVERRIDE_INVALID: { status: 400, title: 'Method override is invalid or unreadable' },
  TRANSFER_ENCODING_UNSUPPORTED: { status: 501, title: 'Transfer coding not supported' },
  REQUEST_HEADERS_TOO_MANY: { status: 431, title: 'Too many request header lines' },
  AUTH_TOKEN_INVALID: { status: 401, title: 'Bearer token missing or not valid' },
  AUTH_KEYS_UNAVAILABLE: { status: 503, title: 'Token signing keys unavailable' },
  JSON_DUPLICATE_KEY: { status: 400, title: 'JSON body has a duplicate object key' },
  IDEMPOTENCY_KEY_MISSING: { status: 400, title: 'Idempotency key required' },
  IDEMPOTENCY_KEY_INVALID: { status: 400, title: 'Idempotency key is invalid' },
  IDEMPOTENCY_KEY_IN_FLIGHT: { status: 409, title: 'A request with this key is still in flight' },
  IDEMPOTENCY_KEY_REUSED: { status: 422, title: 'Key reused with a different request' },
  REQUEST_TOO_LARGE: { status: 413, title: 'Request body too large' },
  UPSTREAM_UNREACHABLE: { status: 502, title: 'Upstream unreachable' },
  UPSTREAM_TLS_FAILED: { status: 502, title: 'TLS to the upstream failed' },
  UPSTREAM_CONNECTION_LOST: { status: 502, title: 'Upstream connection lost' },
  UPSTREAM_TIMEOUT: { status: 504, title: 'Upstream timed out' },
  IDEMPOTENCY_OUTCOME_UNKNOWN: { status: 502, title: 'Outcome of the original request is unknown' },
  STORE_UNAVAILABLE: { status: 503, title: 'Idempotency store unavailable' },
  STORE_BUSY: { status: 503, title: 'Idempotency store connections busy' },
  BODIES_IN_FLIGHT_FULL: { status: 503, title: 'Too many request bodies in flight' },
  MONITOR_NOT_FOUND: { status: 404, title: 'No such status monitor' },
  MONITOR_METHOD_NOT_ALLOWED: { status: 405, title: 'A status monitor is read with GET' },
  INTERNAL_ERROR: { status: 500, title: 'Internal proxy error' },
  BAD_REQUEST: { status: 400, title: 'Malformed request' },
} as const satisfies Record<string, { status: number; title: string }>;

export type ErrorCode = keyof typeof ERROR_TABLE;

export interface ProxyErrorOptions {
  route?: string | undefined;
  key?: string | undefined;
  /** Seconds, for 409 and 503 answers. */
  retryAfterSeconds?: number | undefined;
  cause?: unknown;
}

export class ProxyError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly title: string;
  readonly route: string | undefined;
  readonly key: string | undefined;
  readonly retryAfterSeconds: number | undefined;

  constructor(code: ErrorCode, detail: string, options: ProxyErrorOptions = {}) {
    super(detail, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'ProxyError';
    this.code = code;
    this.status = ERROR_TABLE[code].status;
    this.title = ERROR_TABLE[code].title;
    this.route = options.route;
    this.key = options.key;
    this.retryAfterSeconds = options.retryAfterSeconds;
  }
}

/** One problem found in a config file, located as precisely as the parser allows. */
export interface ConfigIssue {
  /** YAML path like `routes[2].idempotency.ttl`, or '' for the document. */
  readonly path: string;
  readonly line: number | undefined;
  readonly column: number | undefined;
  readonly message: string;
}

/** A config that cannot be used; carries every issue found, not just the first. */
export class ConfigError extends Error {
  readonly file: string;
  readonly issues: readonly ConfigIssue[];

  constructor(file: string, issues: readonly ConfigIssue[]) {
    super(formatConfigIssues(file, issues));
    this.name = 'ConfigError';
    this.file = file;
    this.issues = issues;
  }
}

/** `config/proxy.yaml:14:7 routes[2].idempotency.ttl: expected a duration like "24h"`, one per line. */
export function formatConfigIssues(file: string, issues: readonly ConfigIssue[]): string {
  return issues
    .map((issue) => {
      const where = issue.line === undefined ? file : `${file}:${issue.line}:${issue.column ?? 1}`;
      const path = issue.path === '' ? '' : ` ${issue.path}:`;
      return `${where}${path} ${issue.message}`;
    })
    .join('\n');
}

/** One of the proxy's errors as written on the wire: status, headers (content-length too) and body. */
export interface ErrorAnswer {
  readonly status: number;
  readonly headers: [string, string][];
  readonly body: Buffer;
}

/** How a route writes the proxy's errors: problem+json, or a protocol profile's shape (src/profiles). */
export type ErrorShape = (error: ProxyError) => ErrorAnswer;
