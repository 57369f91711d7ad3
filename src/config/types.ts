// The compiled configuration: what the rest of the proxy reads. Everything here is already
// validated, defaulted and converted to units (milliseconds, bytes), so nothing on the request path
// re-checks config. Produced by ../compiler/compile.ts from the zod-parsed YAML; frozen after
// compilation. It sits at the bottom of the house: the model imports nothing that reads it.

import type { ErrorShape } from '../errors';

export type HttpMethod = 'GET' | 'HEAD' | 'OPTIONS' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

export const SAFE_METHODS: ReadonlySet<string> = new Set(['GET', 'HEAD', 'OPTIONS']);

export interface ListenerAddress {
  readonly host: string;
  readonly port: number;
  /** Serve HTTPS with this material; undefined: plain HTTP. */
  readonly tls: ServerTlsConfig | undefined;
}

export interface ListenConfig extends ListenerAddress {
  /** Client requests with more header lines than this get 431 (REQUEST_HEADERS_TOO_MANY). */
  readonly maxRequestHeaders: number;
  /** Bytes of request bodies held at once; past it a request is answered 503 unread (http/body-budget.ts). */
  readonly maxBodyBytesInFlight: number;
}

/** A PEM file as read when the config was compiled (config/tls-files.ts): its path and its text. */
export interface PemFile {
  /** Absolute path, for messages. */
  readonly file: string;
  readonly pem: string;
}

export interface ServerTlsConfig {
  readonly cert: PemFile;
  readonly key: PemFile;
  /** CA bundle client certificates are checked against. */
  readonly ca: PemFile | undefined;
  /** none: no client certificate asked; request: asked, not required; require: refused without one. */
  readonly clientAuth: 'none' | 'request' | 'require';
}

export interface UpstreamTlsConfig {
  /** Replaces the system's CAs for this upstream. */
  readonly ca: PemFile | undefined;
  /** Client certificate and key (mTLS), both or neither. */
  readonly cert: PemFile | undefined;
  readonly key: PemFile | undefined;
  /** SNI and the name verified, instead of the URL's host. */
  readonly servername: string | undefined;
  readonly rejectUnauthorized: boolean;
}

export type StoreTlsMode = 'require' | 'verify-ca' | 'verify-full';

/** TLS to PostgreSQL, from store.tls or the URL's libpq parameters (read the same way). */
export interface StoreTlsConfig {
  readonly mode: StoreTlsMode;
  readonly ca: PemFile | undefined;
  readonly cert: PemFile | undefined;
  readonly key: PemFile | undefined;
}

export interface AdminConfig extends ListenerAddress {
  /** Bearer token for the /keys endpoints; undefined when empty (those endpoints are off). */
  readonly token: string | undefined;
}

export interface StoreConfig {
  /** Postgres connection string; undefined means "start the embedded PostgreSQL". */
  readonly url: string | undefined;
  /** Data directory of the embedded PostgreSQL, resolved to an absolute path. */
  readonly dataDir: string;
  /** Table name, already validated as a plain SQL identifier. */
  readonly table: string;
  readonly poolSize: number;
  readonly pruneIntervalMs: number;
  /** Bytes of completed records kept in memory for replays without a round trip; 0 = off. */
  readonly replayCacheBytes: number;
  /** How often the LISTEN connection is proven to deliver (completion-listener.ts). */
  readonly listenProbeIntervalMs: number;
  /** How long a probe may take before the connection counts as lost and the cache goes off. */
  readonly listenProbeTimeoutMs: number;
  /** false sets synchronous_commit=off on the store's connections (faster, less durable). */
  readonly synchronousCommit: boolean;
  /**
   * true: serve (and createProxy) migrate the table at start. false: they only check the schema's
   * version and the role's privileges (db/schema-check.ts), for a role that may not create tables.
   */
  readonly migrate: boolean;
  /** undefined: plain (no store.tls, and the URL has no sslmode or sets sslmode=disable). */
  readonly tls: StoreTlsConfig | undefined;
  /** Completions and releases whose statement failed, sent again until they land (store.outbox). */
  readonly outbox: {
    readonly maxWrites: number;
    readonly maxBytes: number;
    /** How long a client's answer waits for its failed completion before it is sent anyway. */
    readonly holdMs: number;
    /** How long shutdown keeps sending what is pending. */
    readonly drainTimeoutMs: number;
    /** Where answers past the hold are kept on disk (an absolute path); undefined: nowhere. */
    readonly spool: string | undefined;
    readonly spoolMaxBytes: number;
  };
}

export interface UpstreamConfig {
  readonly name: string;
  /** scheme://host[:port], no trailing slash. */
  readonly origin: string;
  /** Base path from the upstream URL ('' or '/api'), prepended to every forwarded path. */
  readonly basePath: string;
  readonly timeoutMs: number;
  /** Only for https:// upstreams; undefined: the system's CAs, the URL's host. */
  readonly tls?: UpstreamTlsConfig | undefined;
}

/** A fingerprint or derive part: 'method' | 'path' | 'query' | 'body' | 'body.<path>' | 'header:<name>' | 'query.<name>'. */
export type RequestPart =
  | { readonly kind: 'method' }
  | { readonly kind: 'path' }
  | { readonly kind: 'query' }
  | { readonly kind: 'body' }
  /** The body's bytes, never parsed as JSON (a protocol profile's, not a config part). */
  | { readonly kind: 'raw-body' }
  | { readonly kind: 'body-field'; readonly path: readonly string[] }
  | { readonly kind: 'header'; readonly name: string } // lower-case
  | { readonly kind: 'query-param'; readonly name: string };

export interface KeyPolicy {
  /** Request header carrying the key, lower-case. */
  readonly header: string;
  /**
   * What the upstream receives in forwardKeyAs: the key as sent, a hash of scope, tenant and key
   * (outgoing.ts), or nothing.
   */
  readonly forward: 'raw' | 'scoped' | 'none';
  readonly required: boolean;
  readonly maxLength: number;
  /**
   * Where a key sent in the body is (key.body), as RFC 6901 reference tokens already unescaped:
   * '/meta/idempotency~1key' → ['meta', 'idempotency/key']; null when not configured.
   */
  readonly body: readonly string[] | null;
  /** key.body as written, for messages. */
  readonly bodyPointer: string | null;
  /** Parts a key is derived from when none is sent; null when not configured. */
  readonly derive: readonly RequestPart[] | null;
  readonly windowMs: number | null;
}

export interface FingerprintPolicy {
  readonly parts: readonly RequestPart[];
  /** JSON body paths dropped before hashing, each as path segments: 'body.meta.sent_at' → ['meta','sent_at']. */
  readonly ignore: readonly (readonly string[])[];
}

/** An MCP route's settings (src/mcp/README.md): which tools/call requests are protected and how. */
export interface McpPolicy {
  /** True when calls of this tool are protected (a name or glob of `tools` matches it). */
  readonly protects: (tool: string) => boolean;
  /** `tools` as written, for messages. */
  readonly tools: readonly string[];
  /** Paths under params.arguments left out of the fingerprint and derived key: ['trace_id']. */
  readonly ignore: readonly (readonly string[])[];
  /** mcp.tasks: slow calls answered as tasks to clients that take them; null: never. */
  readonly tasks: TasksPolicy | null;
}

/** mcp.tasks compiled: a long call's timing, and how long a task's result is kept. */
export interface TasksPolicy extends LongCallPolicy {
  /** The record's ttl for calls a client may take as tasks; null: the route's. */
  readonly ttlMs: number | null;
}

/** How a slow call is answered with a handle to poll (docs/long-calls.md). */
export interface LongCallPolicy {
  readonly afterMs: number;
  readonly pollIntervalMs: number;
}

/** An A2A route's settings (src/a2a/README.md): none yet; the block marks the route. */
export type A2aPolicy = Readonly<Record<string, never>>;

/**
 * How a route asks its upstream whether an unknown outcome happened (docs/reconcile.md): a probe
 * request (REST) or tool call (MCP), and how its answer reads. Pointers are parsed (RFC 6901).
 */
export interface ReconcilePolicy {
  readonly probe:
    | {
        readonly kind: 'request';
        readonly method: string;
        /** The path template: {key} and {body:/pointer} placeholders. */
        readonly path: string;
        /** Lower-case names; null: a triggering retry's own headers. */
        readonly headers: Readonly<Record<string, string>> | null;
      }
    | {
        readonly kind: 'tool';
        readonly name: string;
        /** Strings may hold {key} and {arguments:/pointer} placeholders. */
        readonly arguments: Readonly<Record<string, unknown>>;
      };
  readonly foundStatus: readonly number[];
  readonly exists: readonly string[] | null;
  readonly notFoundStatus: readonly number[];
  readonly answerStatus: number | null;
  readonly answerBody: readonly string[] | null;
  /** "Not found" is trusted only this long after the original was sent. */
  readonly afterMs: number;
  /** The background sweep's period; 0: only a retry triggers a probe. */
  readonly everyMs: number;
  /** No probe this long after the original was sent: the record stays unknown. */
  readonly giveUpAfterMs: number;
}

/** `streams:` compiled: what makes an upstream answer a stream. */
export interface StreamRule {
  /** Lower-case media types, no parameters. */
  readonly contentTypes: ReadonlySet<string>;
  /** An answer with no Content-Length, sent chunked, is a stream. */
  readonly chunked: boolean;
}

export interface IdempotencyPolicy {
  /** Route name, or `group` when keys are shared across routes. */
  readonly scope: string;
  readonly key: KeyPolicy;
  /** Header name the key is forwarded upstream as (original spelling), or null to strip it. */
  readonly forwardKeyAs: string | null;
  readonly ttlMs: number;
  readonly lockTimeoutMs: number;
  readonly unknownOutcome: 'fail' | 'retry';
  readonly onConcurrent: 'reject' | 'wait' | 'attach';
  readonly waitTimeoutMs: number;
  /** Which upstream answers are streams (protected/stream-rule.ts): sent on as they arrive. */
  readonly streams: StreamRule;
  /** Repeats of one key an instance holds waiting on its first request (local-keys.ts); more get 409. */
  readonly maxWaitersPerKey: number;
  readonly fingerprint: FingerprintPolicy;
  /**
   * Names the policy the request fingerprint is computed under (`fingerprint` and, on an MCP route,
   * `mcp.ignore`): equal for equal policies, in every config and process. What memory answers by
   * carries it (store/record.ts memoryKey), so a reload that changes a route's policy leaves its
   * cached answers behind, and the routes of a group share them only when they fingerprint alike.
   */
  readonly fingerprintEpoch: string;
  /**
   * Tenant parts: `header:<name>` (lower-case names) and `jwt:<claim>` (claim names as written)
   * entries; empty = not tenanted.
   */
  readonly tenant: readonly string[];
  /** The claims of the `jwt:<claim>` tenant parts: a request must carry a verified token with them. */
  readonly tenantClaims: readonly string[];
  /** True when the upstream status should be stored (in `store`, not in `release`). */
  readonly storesStatus: (status: number) => boolean;
  readonly maxRequestBytes: number;
  readonly maxResponseBytes: number;
  /** Replay marker header, original spelling. */
  readonly replayedHeader: string;
  readonly enforce: boolean;
  readonly allowSafeMethods: boolean;
  readonly replaySetCookie: boolean;
  /** How request logs show the key: as sent, or as a short hash. */
  readonly logKey: 'plain' | 'hash';
  /** Lower-case response header names never replayed (besides `date`, which is always fresh). */
  readonly dropReplayHeaders: ReadonlySet<string>;
  /**
   * Lower-case request headers the key, tenant, fingerprint or derived key read: a Connection
   * header naming one would make the proxy drop what it decided on (src/http/README.md).
   */
  readonly readsHeaders: ReadonlySet<string>;
  /** Set on a route that fronts an MCP server: only protected tools/call requests are claimed. */
  readonly mcp: McpPolicy | null;
  /** Set on a route that fronts an A2A agent: only message sends are claimed, keyed by messageId. */
  readonly a2a: A2aPolicy | null;
  /** Set when unknown outcomes are resolved by asking the upstream (idempotency.reconcile). */
  readonly reconcile: ReconcilePolicy | null;
  /** idempotency.async: requests with `Prefer: respond-async` may get a 202 and a monitor; null: off. */
  readonly async: LongCallPolicy | null;
  /** The commerce protocol whose contract the route speaks (src/profiles), or null. */
  readonly profile: 'acp' | 'ucp' | null;
  /** How the proxy's own errors are written on this route: problem+json, or the profile's shape. */
  readonly errorShape: ErrorShape;
  /** Response header every answer to a keyed request echoes its key in (original spelling); null: none. */
  readonly echoKeyAs: string | null;
  /** Keys are unique per request path too (the record's scope is the route's plus the path). */
  readonly scopeByPath: boolean;
}

export interface RouteMatch {
  /** Upper-case methods; null = any method. */
  readonly methods: ReadonlySet<string> | null;
  /** Exact path, a pattern with `:param` segments, or `/prefix/**`. */
  readonly path: string;
  /** Lower-case host name without port; null = any host. */
  readonly host: string | null;
  /** Protected routes match a trailing slash and any letter case unless strict (src/http/README.md). */
  readonly strict: boolean;
  /** Format suffixes (`json`, lower-case) a path may end with and still take this route; [] = none. */
  readonly formats: readonly string[];
}

export interface RouteConfig {
  readonly name: string;
  readonly match: RouteMatch;
  readonly upstream: UpstreamConfig;
  /** Removed from the front of the request path before forwarding; null = none. */
  readonly stripPrefix: string | null;
  /** The upstream honours method-override headers: route by them and forward them (src/http/README.md). */
  readonly methodOverride: boolean;
  /** null = pass-through route. */
  readonly idempotency: IdempotencyPolicy | null;
}

/** A JSON Web Key Set as read from a file (its keys are checked by jose when a token needs one). */
export interface JwksDocument {
  readonly keys: readonly Record<string, unknown>[];
}

/** auth.jwt: how bearer tokens are verified for routes scoped by a claim (auth/jwt-principals.ts). */
export interface JwtConfig {
  /** An http(s) URL fetched and cached, or the keys of a file read when the config was compiled. */
  readonly jwks:
    | { readonly kind: 'url'; readonly url: string }
    | { readonly kind: 'file'; readonly file: string; readonly keySet: JwksDocument };
  readonly issuer: readonly string[];
  readonly audience: readonly string[];
  readonly algorithms: readonly string[];
  readonly clockSkewMs: number;
  /** After a fetch, how long an unknown kid waits before the URL is fetched again. */
  readonly cooldownMs: number;
  /** How often the URL is fetched again in the background. */
  readonly refreshMs: number;
}

export interface AuthConfig {
  /** null: no route may scope by a jwt claim (the compiler refuses it). */
  readonly jwt: JwtConfig | null;
}

export interface ProxyConfig {
  /** Absolute path of the file this was loaded from (for messages). */
  readonly file: string;
  readonly listen: ListenConfig;
  readonly shutdownGraceMs: number;
  /** Processes serving the listener (`auto` resolved to this machine's cores); 1 = no cluster. */
  readonly workers: number;
  /** Used heap bytes past which a serving process collects at once (heap-bound.ts); 0 = off. */
  readonly heapTargetBytes: number;
  readonly admin: AdminConfig;
  readonly store: StoreConfig;
  readonly upstreams: ReadonlyMap<string, UpstreamConfig>;
  /** Peers (addresses and CIDRs, as written) whose forwarding headers are kept. */
  readonly trustedProxies: readonly string[];
  readonly auth: AuthConfig;
  readonly routes: readonly RouteConfig[];
}
