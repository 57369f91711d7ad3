// The zod schema of the YAML config: shapes, formats and defaults of every field, with
// the plain-English "expected …" messages users see. Strict everywhere so a typo is an error at the
// typo. Cut per feature: the building blocks are schema-formats.ts; the mcp and a2a blocks
// protocol-schema.ts, reconcile reconcile-schema.ts, the TLS settings tls-schema.ts, auth.jwt
// jwt-schema.ts. Checks that need more than one field (unique names, known upstreams, safe
// methods) live in ../compiler/compile.ts, and where a route's setting comes from in setting.ts.
// The schema sees values after ${VAR} interpolation, so it also accepts numbers and booleans
// spelled as strings ("8080", "true") wherever a number or boolean is expected, whether or not the
// string came from the environment: `port: ${PORT:-8080}` has to work, and a quoted `port: "8080"`
// is no less clear.
import { z } from 'zod';
import { tryParseSizeBytes } from './units';
import {
  addressOrCidr,
  bodyField,
  bool,
  D,
  duration,
  formatName,
  headerName,
  hostName,
  HTTP_METHODS,
  integer,
  jsonPointer,
  listenHost,
  MAX_WORKERS,
  method,
  name,
  opt,
  parts,
  pathPattern,
  pathPrefix,
  pattern,
  port,
  quotedText,
  size,
  status,
  statusClass,
  storeUrl,
  strict,
  TABLE_HINT,
  TABLE_LENGTH_HINT,
  tenantPart,
  timer,
  toBoolean,
  toNumber,
  upstreamUrl,
  WORKERS_HINT,
} from './schema-formats';
import { a2aOrFlag, mcpOrFlag } from './protocol-schema';
import { reconcileBlock } from './reconcile-schema';
import { asyncOrFlag } from './long-call-schema';
import { listenerTls, storeTls, upstreamTls } from './tls-schema';
import { jwtSchema } from './jwt-schema';
const keyBlock = strict(
  {
    header: opt(headerName, 'Where clients send the key.', D.key.header),
    forward: opt(
      z.enum(['raw', 'scoped', 'none'], { error: 'expected raw, scoped or none' }),
      "What the upstream receives in forwardKeyAs: raw = the key as sent (two tenants' keys can be equal); scoped = a hash of route scope, tenant and key (64 hex); none = nothing.",
      D.key.forward,
    ),
    required: opt(bool, 'No key → 400; false → forwarded unprotected.', D.key.required),
    maxLength: opt(integer(1, 1024), 'Longer keys → 400.', D.key.maxLength),
    body: opt(
      jsonPointer,
      'Where the key is in a JSON body when no key header is sent (RFC 6901 pointer; on an MCP route into the JSON-RPC message, like /params/arguments/meta/idempotency-key).',
    ),
    derive: opt(
      parts('request part'),
      "Request parts a key is derived from when none is sent: body, body.<field>, header:<name>, query.<name>. key.maxLength must be at least 51 (a derived key's length).",
    ),
    window: opt(
      duration({ positive: true }),
      "How long a derived key's record lives (only with key.derive; default: ttl).",
    ),
  },
  'key settings (header, body, forward, required, maxLength, derive, window)',
);

const fingerprintBlock = strict(
  {
    parts: opt(
      parts('fingerprint part'),
      'What a repeat must match (else 422); also body.<field>, header:<name>, query.<name>.',
      D.fingerprint.parts,
    ),
    ignore: opt(
      z.array(bodyField),
      'JSON body fields left out of the fingerprint and of derived keys, e.g. body.sent_at.',
      [],
    ),
  },
  'fingerprint settings (parts, ignore)',
);

const mediaType = pattern(
  /^[a-z0-9!#$&^_.+-]+\/[a-z0-9!#$&^_.+-]+$/i,
  'expected a media type like "text/event-stream" (no parameters)',
  'media type',
);
const streamsBlock = strict(
  {
    contentTypes: opt(
      z.array(mediaType),
      'Content-Types of an answer that is a stream: sent on as each chunk arrives, and stored once whole.',
      D.streams.contentTypes,
    ),
    chunked: opt(
      bool,
      'An answer sent chunked with no Content-Length is a stream too (off by default: many servers send a plain answer chunked).',
      D.streams.chunked,
    ),
  },
  'stream settings (contentTypes, chunked)',
);

const forwardKeyAs = z.preprocess(
  toBoolean,
  z.union([headerName, z.literal(false)], { error: 'expected a header name or false' }),
);
const storeList = z.array(statusClass).min(1, { error: 'expected at least one status class' });
const positive = duration({ positive: true });

export const idempotencySchema = strict(
  {
    key: opt(keyBlock, 'Where the key comes from and which keys are accepted.'),
    forwardKeyAs: opt(
      forwardKeyAs,
      'Header the upstream receives the key in; false strips it.',
      D.forwardKeyAs,
    ),
    ttl: opt(positive, 'How long a completed record is replayed.', D.ttl),
    lockTimeout: opt(
      timer,
      "Lease of an in-progress claim; keep it longer than the upstream's timeout.",
      D.lockTimeout,
    ),
    unknownOutcome: opt(
      z.enum(['fail', 'retry'], { error: 'expected fail or retry' }),
      'Timed out or dropped after sending: fail stores and replays the unknown-outcome answer (at most once); retry lets a repeat forward again with the same key after the lease (for upstreams that dedupe on it).',
      D.unknownOutcome,
    ),
    onConcurrent: opt(
      z.enum(['reject', 'wait', 'attach'], { error: 'expected reject, wait or attach' }),
      'A repeat while the first is in flight: reject (409 + Retry-After), wait (block until it completes, then replay) or attach (a streamed answer: what was sent so far, then the rest live; else as wait).',
      D.onConcurrent,
    ),
    waitTimeout: opt(
      timer,
      'Longest wait under onConcurrent: wait or attach (then 409).',
      D.waitTimeout,
    ),
    maxWaitersPerKey: opt(
      integer(1, 1_000_000),
      'Repeats of one key this instance holds waiting for its first request; more get 409.',
      D.maxWaitersPerKey,
    ),
    fingerprint: opt(fingerprintBlock, 'Which request parts a repeat must match (else 422).'),
    streams: opt(
      streamsBlock,
      'Which answers are streams: passed to the client chunk by chunk as they arrive, captured and stored once whole.',
    ),
    store: opt(
      storeList,
      'Upstream statuses saved and replayed (classes or numbers), except release.',
      D.store,
    ),
    release: opt(
      z.array(status),
      'Statuses where the upstream did not act: the claim is dropped, so a retry runs.',
      D.release,
    ),
    maxRequestBytes: opt(size, 'Larger request bodies → 413.', D.maxRequestBytes),
    maxResponseBytes: opt(
      size,
      'Larger answers are delivered in full, and replayed without a body (Idempotent-Body-Omitted: true).',
      D.maxResponseBytes,
    ),
    replayedHeader: opt(headerName, 'The replay marker header.', D.replayedHeader),
    enforce: opt(
      bool,
      'false = shadow mode: forward everything, log what enforcement would have done.',
      D.enforce,
    ),
    tenant: opt(
      z.array(tenantPart),
      'Who keys belong to: claims of the verified bearer token (jwt:sub, with auth.jwt) or request headers (header:<name>); scoped per hashed value, raw values are never stored.',
    ),
    group: opt(
      name('a group name'),
      'Share keys across the routes with the same group (default: the route name).',
    ),
    allowSafeMethods: opt(
      bool,
      "Allow GET, HEAD or OPTIONS in a protected route's match.method.",
      D.allowSafeMethods,
    ),
    replaySetCookie: opt(bool, 'Store and replay Set-Cookie.', D.replaySetCookie),
    logKey: opt(
      z.enum(['plain', 'hash'], { error: 'expected plain or hash' }),
      'How request logs show the key: plain, or hash (sha256:<16 hex>) when keys are sensitive.',
      D.logKey,
    ),
    dropReplayHeaders: opt(
      z.array(headerName),
      "Response headers stored but never replayed to a later caller (a route's list replaces the default); Date is always sent fresh.",
      D.dropReplayHeaders,
    ),
    reconcile: opt(
      reconcileBlock,
      'Unknown outcomes (unknownOutcome: fail) resolved by asking the upstream: found → its answer is stored, not found → the retry is forwarded once (docs/reconcile.md).',
    ),
    async: opt(
      asyncOrFlag,
      'A request sent with `Prefer: respond-async` and not answered within `after` gets 202 Accepted and a status monitor to poll (RFC 7240; docs/long-calls.md). REST routes only (MCP: mcp.tasks).',
    ),
    mcp: opt(
      mcpOrFlag,
      'The route fronts an MCP server (Streamable HTTP): only tools/call requests for the listed tools are protected, keyed by header, params.idempotencyKey or tool + arguments; everything else passes through.',
    ),
    profile: opt(
      z.enum(['acp', 'ucp'], { error: 'expected acp or ucp' }),
      "Speak a commerce protocol's idempotency contract (statuses, error bodies, key and storage rules): acp (Agentic Commerce Protocol) or ucp (Universal Commerce Protocol); see docs/protocol-profiles.md.",
    ),
    a2a: opt(
      a2aOrFlag,
      'The route fronts an A2A agent: only message sends (JSON-RPC SendMessage, SendStreamingMessage, message/send, message/stream; HTTP+JSON POST …/message:send, …/message:stream) are protected, keyed by the key header or message.messageId; everything else passes through.',
    ),
  },
  'idempotency settings',
);

const methodList = z.array(method).min(1, { error: 'expected at least one method' });
const methods = z.union([method, methodList], {
  error: `expected an HTTP method (${HTTP_METHODS.join(', ')}) or a list of them`,
});
const idempotencyOrFlag = z.preprocess(
  toBoolean,
  z.union([z.boolean(), idempotencySchema], {
    error: 'expected false (pass-through), true (defaults) or a mapping of idempotency settings',
  }),
);

const routeSchema = strict(
  {
    name: name('a route name').describe('Unique route name; the key scope unless group is set.'),
    match: strict(
      {
        method: opt(methods, 'A method or a list of them; absent = any method.'),
        path: pathPattern
          .default('/**')
          .describe(
            'Exact (/refunds), with parameters (/orders/:id/refund), or a prefix (/mail/**, also matching /mail).',
          ),
        host: opt(
          hostName,
          "Host header to match, without port (an absolute-form target's authority wins over Host); absent = any host.",
        ),
        strict: opt(
          bool,
          'Protected routes also match a trailing slash and any letter case (as Express routes); true turns that off.',
          false,
        ),
        formats: opt(
          z.array(formatName),
          "Format suffixes that still take this route, as Rails' (.:format) routes them: [json, xml] lets /refunds.json and /refunds/.json match /refunds (the suffix stays in the fingerprint).",
          [],
        ),
      },
      'match settings (method, path, host, strict, formats)',
    ).describe('Which requests this route takes; routes are tried in order, first match wins.'),
    upstream: z
      .string({ error: 'expected an upstream name' })
      .meta({ title: 'name' })
      .describe('A name from upstreams.'),
    stripPrefix: opt(
      pathPrefix,
      'Removed from the front of the path before forwarding (/mail/emails → /emails).',
    ),
    methodOverride: opt(
      bool,
      "The upstream honours X-HTTP-Method-Override (and X-HTTP-Method, X-Method-Override) and a POST's _method (query, form, multipart or JSON body): route and protect by the overriding method, and forward them. Off: they are removed (a JSON body's _method is refused).",
      false,
    ),
    idempotency: opt(
      idempotencyOrFlag,
      'false or absent: pass-through; true, {} or a mapping: protected, merged over defaults field by field.',
    ),
  },
  'route settings (name, match, upstream, stripPrefix, methodOverride, idempotency)',
);

const upstreamSchema = strict(
  {
    url: upstreamUrl.describe(
      'http(s)://host:port[/base]; a base path is prepended to forwarded paths.',
    ),
    timeout: timer
      .default('30s')
      .describe(
        'No response headers (or a stalled body) within this → 504, outcome unknown. Checked about twice a second, so it fires up to ~1 s after it is due.',
      ),
    tls: opt(upstreamTls, 'TLS towards an https:// upstream (every path, websockets included).'),
  },
  'upstream settings (url, timeout, tls)',
);

// The table name is pasted into SQL (identifiers cannot be parameters), so only plain identifiers;
// 50 characters leaves room for the suffixes the store appends (`_migrations`, index names).
const tableName = pattern(/^[a-z_][a-z0-9_]*$/, TABLE_HINT, 'SQL identifier').max(50, {
  error: TABLE_LENGTH_HINT,
});

export const configSchema = strict(
  {
    listen: strict(
      {
        host: listenHost.default('0.0.0.0').describe('Address clients connect to.'),
        port: port.default(8080).describe('Port clients connect to.'),
        // At most 500: Node's http server takes 1,000 lines by default (the proxy's own parser too),
        // and the proxy adds its own (the key, X-Forwarded-*, trace headers) to what the client sent.
        maxRequestHeaders: integer(16, 500, 'expected a number of header lines from 16 to 500')
          .default(100)
          .describe(
            "Requests with more header lines than this get 431 REQUEST_HEADERS_TOO_MANY; keep it a few lines under the upstream's own limit: the proxy adds up to 8 (the key, X-Forwarded-*, trace headers).",
          ),
        maxBodyBytesInFlight: size
          .refine((text) => (tryParseSizeBytes(text) ?? 0) > 0, {
            error: 'expected a size greater than 0b',
          })
          .default('64mb')
          .describe(
            'Request bodies held in memory at once (protected routes read each whole before forwarding it); past it new ones get 503 BODIES_IN_FLIGHT_FULL with Retry-After, unread.',
          ),
        tls: listenerTls('proxy'),
      },
      'listen settings (host, port, maxRequestHeaders, maxBodyBytesInFlight, tls)',
    )
      .prefault({})
      .describe('Where clients connect.'),
    shutdownGrace: duration({ timer: true })
      .default('10s')
      .describe('How long SIGTERM waits for in-flight requests.'),
    workers: z
      .preprocess(
        toNumber,
        z.union(
          [
            z.literal('auto'),
            z
              .int({ error: WORKERS_HINT })
              .min(1, { error: WORKERS_HINT })
              .max(MAX_WORKERS, { error: WORKERS_HINT }),
          ],
          { error: WORKERS_HINT },
        ),
      )
      .default(1)
      .describe(
        'Processes serving the listener (node:cluster); "auto" = one per core. 1 = no cluster.',
      ),
    heapTarget: size
      .default('48mb')
      .describe(
        "The JavaScript heap's used size past which each serving process collects its garbage at once (one full collection, tens of milliseconds) instead of letting V8 grow the heap to several times what is alive; a target, not a cap: a live heap above it is collected less often, never refused. 0b turns it off.",
      ),
    admin: strict(
      {
        host: listenHost.default('127.0.0.1').describe('Address of the admin listener.'),
        port: port.default(9090).describe('Port of the admin listener.'),
        token: quotedText.default('').describe('Bearer token for /keys; empty turns /keys off.'),
        tls: listenerTls('admin'),
      },
      'admin settings (host, port, token, tls)',
    )
      .prefault({})
      .describe(
        'The admin listener, apart from client traffic: health, readiness, metrics, /keys.',
      ),
    store: strict(
      {
        url: storeUrl
          .default('')
          .describe('PostgreSQL URL; empty = embedded PostgreSQL. DATABASE_URL overrides it.'),
        dataDir: pattern(/./, 'expected a directory', 'directory')
          .default('.data/postgres')
          .describe("The embedded server's data directory, relative to the working directory."),
        table: tableName
          .default('idempotency_keys')
          .describe('The records table: [a-z_][a-z0-9_]*, at most 50 characters.'),
        poolSize: integer(1, 1000)
          .default(10)
          .describe('PostgreSQL connections per proxy instance.'),
        pruneInterval: timer.default('5m').describe('How often expired records are deleted.'),
        replayCache: size
          .default('32mb')
          .describe(
            'Memory for completed records answered without a round trip (admitted on their first repeat); 0b turns it off.',
          ),
        listenProbeInterval: timer
          .default('5s')
          .describe(
            'How often the LISTEN connection proves it still delivers (a NOTIFY to itself); the replay cache is off while it does not.',
          ),
        listenProbeTimeout: timer
          .default('2s')
          .describe(
            'How long that probe may take to come back before the cache goes off and the connection is replaced.',
          ),
        synchronousCommit: bool
          .default(true)
          .describe('false: faster claims, but a PostgreSQL crash can lose the newest ones.'),
        migrate: bool
          .default(true)
          .describe(
            "true: serve migrates the table at start. false: serve only checks that the schema is at this build's version and its role may use the table, and refuses to start otherwise (run `idempotency-proxy migrate` first, with a role that may create tables).",
          ),
        tls: opt(
          storeTls,
          "TLS to PostgreSQL (pool, LISTEN, migrate, check); the URL's sslmode/sslrootcert/sslcert/sslkey are read the same way (libpq's meaning; prefer/allow are refused).",
        ),
        outbox: strict(
          {
            maxWrites: integer(1, 10_000_000)
              .default(10_000)
              .describe(
                'Completions and releases kept in memory while their statement fails; past it the oldest is dropped (an error line).',
              ),
            maxBytes: size
              .refine((text) => (tryParseSizeBytes(text) ?? 0) > 0, {
                error: 'expected a size greater than 0b',
              })
              .default('64mb')
              .describe(
                'Memory those pending answers may hold; past it the oldest are dropped (with a spool: let go from memory, read back from the spool).',
              ),
            holdAnswer: duration({ timer: true })
              .default('2s')
              .describe(
                "How long a client's answer waits for its failed completion to land before it is sent anyway (the proxy keeps trying).",
              ),
            drainTimeout: duration({ timer: true })
              .default('30s')
              .describe(
                "How long shutdown keeps sending pending writes after draining requests (30s: Kubernetes' default terminationGracePeriodSeconds); what is left goes to the spool, or is logged one error line per write. Give the orchestrator's stop timeout shutdownGrace plus this.",
              ),
            spool: z
              .preprocess(
                // Empty (an unset variable's `${X:-}`): the default.
                (v: unknown) => (v === '' ? undefined : toBoolean(v)),
                z
                  .union([z.literal(false), pattern(/./, 'expected a directory', 'directory')], {
                    error: 'expected a directory, or false',
                  })
                  .optional(),
              )
              .describe(
                "A directory on local disk where an answer whose completion could not be stored within holdAnswer is written (and flushed) before its client gets it, so that a crash or a stop during a PostgreSQL outage loses nothing: the next start stores it first. false: none (a process that ends with answers queued loses them). Unset: the embedded PostgreSQL's keeps one beside its data directory (<dataDir>-spool); with a store URL, none. Made 0700, owned by the proxy's user; one process per spool (workers get worker-N inside it).",
              ),
            spoolMaxBytes: size
              .refine((text) => (tryParseSizeBytes(text) ?? 0) > 0, {
                error: 'expected a size greater than 0b',
              })
              .default('1gb')
              .describe(
                'The most the spool holds; past it an answer is not sent until it is stored, and new claims get 503 meanwhile.',
              ),
          },
          'store.outbox settings (maxWrites, maxBytes, holdAnswer, drainTimeout, spool, spoolMaxBytes)',
        )
          .prefault({})
          .describe(
            'Completions and releases whose statement failed (a connection cut, a restart), sent again until they land.',
          ),
      },
      'store settings (url, dataDir, table, poolSize, pruneInterval, replayCache, listenProbeInterval, listenProbeTimeout, synchronousCommit, migrate, tls, outbox)',
    )
      .prefault({})
      .describe('The PostgreSQL holding the idempotency records.'),
    upstreams: z
      .record(name('an upstream name'), upstreamSchema, {
        error: 'expected a mapping of upstreams',
      })
      .describe('Services the proxy forwards to, by name.'),
    trustedProxies: z
      .array(addressOrCidr)
      .default([])
      .describe(
        'Addresses or CIDRs of proxies in front of this one whose X-Forwarded-Host/-Proto and Forwarded headers are kept; from anyone else they are replaced.',
      ),
    auth: opt(
      strict(
        {
          jwt: opt(
            jwtSchema,
            'How bearer tokens are verified, for routes scoped by a claim (tenant: [jwt:sub]).',
          ),
        },
        'auth settings (jwt)',
      ),
      'Who a caller is: the verified principal that jwt:<claim> tenant parts scope keys by.',
    ),
    defaults: opt(idempotencySchema, 'Idempotency settings every protected route starts from.'),
    routes: z
      .array(routeSchema, { error: 'expected a list of routes' })
      .min(1, { error: 'expected at least one route' })
      .describe('Routes in match order; the first match wins.'),
  },
  'config sections (listen, shutdownGrace, workers, heapTarget, admin, store, upstreams, trustedProxies, auth, defaults, routes)',
);

export type ParsedConfig = z.output<typeof configSchema>;
export type ParsedRoute = ParsedConfig['routes'][number];
export type IdempotencyBlock = z.output<typeof idempotencySchema>;
