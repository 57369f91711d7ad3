// The zod schema of the YAML config: shapes, formats and defaults of every field, with
// the plain-English "expected …" messages users see. Strict everywhere so a typo is an error at the
// typo. Checks that need more than one field (unique names, known upstreams, safe methods) live in
// compile.ts. The schema sees values after ${VAR} interpolation, so it also accepts numbers and
// booleans spelled as strings ("8080", "true") wherever a number or boolean is expected, whether or
// not the string came from the environment: `port: ${PORT:-8080}` has to work, and a quoted
// `port: "8080"` is no less clear.
import { z } from 'zod';
import {
  DURATION_HINT,
  DURATION_PATTERN,
  MAX_TIMER_MS,
  SIZE_HINT,
  SIZE_PATTERN,
  tryParseDurationMs,
  tryParseSizeBytes,
} from './units';
import { parseAddressOrCidr } from './addresses';

const knownKeys = new WeakMap<object, readonly string[]>();

/** Keys a strict object accepts, for "did you mean" hints on unknown keys. */
export function knownKeysOf(schema: unknown): readonly string[] | undefined {
  return typeof schema === 'object' && schema !== null ? knownKeys.get(schema) : undefined;
}

function strict<T extends z.core.$ZodLooseShape>(shape: T, what: string) {
  const schema = z.strictObject(shape, {
    error: (issue) => (issue.code === 'invalid_type' ? `expected a mapping of ${what}` : undefined),
  });
  knownKeys.set(schema, Object.keys(shape));
  return schema;
}

const toNumber = (v: unknown): unknown =>
  typeof v === 'string' && /^\d+$/.test(v) ? Number(v) : v;
const toBoolean = (v: unknown): unknown => (v === 'true' ? true : v === 'false' ? false : v);

function integer(min: number, max: number, hint = `expected an integer from ${min} to ${max}`) {
  return z.preprocess(toNumber, z.int({ error: hint }).min(min).max(max));
}
// A `title` on a building block names its type in config/README.md (and in editors' hovers):
// "duration" says more than the pattern behind it.
const bool = z.preprocess(toBoolean, z.boolean({ error: 'expected true or false' }));
const port = integer(0, 65535, 'expected a port number from 0 to 65535').meta({ title: 'port' });

function pattern(regex: RegExp, hint: string, title: string) {
  return z.string({ error: hint }).regex(regex, { error: hint }).meta({ title });
}

function duration(options: { positive?: boolean; timer?: boolean }) {
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
const timer = duration({ positive: true, timer: true });
const MAX_WORKERS = 1024;
const WORKERS_HINT = `expected "auto" (one per core) or a number of processes from 1 to ${MAX_WORKERS}`;
const size = pattern(SIZE_PATTERN, SIZE_HINT, 'size');

// RFC 9110 §5.1: field names are tokens.
const TOKEN = "[!#$%&'*+.^_`|~0-9A-Za-z-]+";
const BODY_FIELD = String.raw`body(?:\.[^.\s]+)+`;
const headerName = pattern(
  new RegExp(`^${TOKEN}$`),
  'expected an HTTP header name like "Idempotency-Key"',
  'header name',
);
const bodyField = pattern(
  new RegExp(`^${BODY_FIELD}$`),
  'expected a body field like "body.sent_at"',
  'body field',
);
// A claim name is any JSON member name without whitespace: `sub`, `org_id`, or a namespaced one
// like `https://example.com/tenant` (Auth0's custom claims).
const tenantPart = pattern(
  new RegExp(`^(?:header:${TOKEN}|jwt:\\S+)$`),
  'expected "jwt:<claim>" (a claim of the verified bearer token, like "jwt:sub") or "header:<name>"',
  'jwt:<claim> or header:<name>',
);
// RFC 6901: "/" then reference tokens, "~" only as "~0" or "~1". The whole document ("") is no key.
const jsonPointer = pattern(
  /^(?:\/(?:[^~]|~[01])*)+$/,
  'expected a JSON pointer (RFC 6901) like "/meta/idempotency_key": "/" before each member name, "~" written "~0" and "/" inside a name "~1"',
  'JSON pointer',
);
const requestPart = pattern(
  new RegExp(`^(?:method|path|query|body|${BODY_FIELD}|header:${TOKEN}|query\\.[^\\s&=#]+)$`),
  'expected a request part: method, path, query, body, body.<field>, header:<name> or query.<name>',
  'request part',
);
const parts = (what: string) =>
  z.array(requestPart).min(1, { error: `expected at least one ${what}` });

// Names end up in admin URLs (/keys/{route}/{key}) and logs: keep them plain.
const NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;
const name = (what: string) =>
  pattern(
    NAME_PATTERN,
    `expected ${what} of letters, digits, ".", "_" or "-", starting with a letter or digit`,
    'name',
  );

const HTTP_METHODS = ['GET', 'HEAD', 'OPTIONS', 'POST', 'PUT', 'PATCH', 'DELETE'] as const;
const method = z
  .enum([...HTTP_METHODS, ...HTTP_METHODS.map((m) => m.toLowerCase())], {
    error: `expected an HTTP method (${HTTP_METHODS.join(', ')})`,
  })
  .meta({ title: 'method' });

// As http/router.ts matches them: literal segments (a ":" only inside, as in /v1/items:batch),
// `:param` segments, or a final `/**` (which also matches the prefix itself).
const LITERAL = String.raw`[^/:*?#\s][^/*?#\s]*`;
const SEGMENT = String.raw`(?:${LITERAL}|:[A-Za-z_][A-Za-z0-9_]*)`;
const pathPattern = pattern(
  new RegExp(`^(?:/|(?:/${SEGMENT})+/?|(?:/${SEGMENT})*/\\*\\*)$`),
  'expected a path starting with "/": literal segments, ":param" segments, or a final "/**"',
  'path pattern',
);
const formatName = pattern(
  /^[a-z0-9]{1,16}$/,
  'expected a format suffix like "json" (lower-case letters and digits, no dot)',
  'format',
);
const pathPrefix = pattern(
  new RegExp(`^(?:/${LITERAL})+$`),
  'expected a path prefix like "/mail" (literal segments, no trailing "/")',
  'path prefix',
);
const LABEL = '[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?';
const hostName = pattern(
  new RegExp(`^(?:\\[[0-9A-Fa-f:.]+\\]|${LABEL}(?:\\.${LABEL})*)$`),
  'expected a host name without a port, like "mail.internal"',
  'host name',
);
// No number-to-string coercion: YAML reads `token: 0123` as 123, silently changing the secret.
const quotedText = z
  .string({ error: 'expected a string (quote it if it looks like a number)' })
  .meta({ title: 'string' });
const TABLE_HINT =
  'expected a plain SQL identifier: lower-case letters, digits and "_", not starting with a digit';
const TABLE_LENGTH_HINT = 'expected at most 50 characters (the store appends "_migrations" etc.)';
const listenHost = pattern(
  /^[^\s/]+$/,
  'expected an address to listen on, like "0.0.0.0" or "127.0.0.1"',
  'address',
);
const storeUrl = pattern(
  /^(?:$|postgres(?:ql)?:\/\/)/,
  'expected a postgres:// URL, or empty for the embedded PostgreSQL',
  'postgres:// URL',
);

const STATUS_HINT = 'expected a status class like "2xx" or a status code from 100 to 599';
const status = z
  .int({ error: 'expected an HTTP status code from 100 to 599' })
  .min(100)
  .max(599)
  .meta({ title: 'status' });
const statusClass = z
  .union([pattern(/^[1-5]xx$/, STATUS_HINT, 'status class'), status], { error: STATUS_HINT })
  .meta({ title: 'status or class' });

const ADDRESS_HINT = 'expected an IP address or CIDR, like "10.0.0.0/8" or "::1"';
const addressOrCidr = z
  .string({ error: ADDRESS_HINT })
  .refine((text) => parseAddressOrCidr(text) !== undefined, { error: ADDRESS_HINT })
  .meta({ title: 'address or CIDR' });

// Only the scheme here (it also lands in the JSON Schema); compile.ts parses and splits the URL.
const upstreamUrl = pattern(
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

const D = IDEMPOTENCY_DEFAULTS;

/**
 * An optional field with editor help and its built-in default (shown by editors; applied in
 * compile.ts, not here). Idempotency fields stay optional so a route's block can be merged field
 * by field over `defaults`.
 */
function opt<T extends z.ZodType>(schema: T, description: string, fallback?: unknown) {
  return schema
    .optional()
    .meta(fallback === undefined ? { description } : { description, default: fallback });
}

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

const toolPattern = pattern(
  /^[^\s]+$/,
  'expected a tool name or a glob like "refund_*" (no spaces)',
  'tool name or glob',
);
const argumentPath = pattern(
  /^arguments(?:\.[^.\s]+)+$/,
  'expected a tool argument like "arguments.trace_id"',
  'argument path',
);

const mcpBlock = strict(
  {
    tools: opt(
      z.array(toolPattern).min(1, { error: 'expected at least one tool name or glob' }),
      'Tools whose calls run once: names or globs (* and ?). Other tools run on every call.',
      ['*'],
    ),
    ignore: opt(
      z.array(argumentPath),
      'Tool arguments left out of the fingerprint and derived key, like arguments.trace_id.',
      [],
    ),
    window: opt(
      duration({ positive: true }),
      "How long a derived key's record lives (default: key.window, else ttl).",
    ),
  },
  'MCP settings (tools, ignore, window)',
);
const mcpOrFlag = z.preprocess((v: unknown) => (toBoolean(v) === true ? {} : v), mcpBlock);
const a2aBlock = strict({}, 'A2A settings (none yet: write a2a: {})');
const a2aOrFlag = z.preprocess((v: unknown) => (toBoolean(v) === true ? {} : v), a2aBlock);

const probePath = pattern(
  /^\/[^\s]*$/,
  'expected a path starting with "/", with {key} and {body:/json/pointer} placeholders',
  'probe path',
);
const statusList = z.array(status).min(1, { error: 'expected at least one status code' });

const reconcileBlock = strict(
  {
    request: opt(
      strict(
        {
          method: opt(method, "The probe's method.", 'GET'),
          path: probePath.describe(
            "The probe's path and query on the route's upstream: {key} is the key as forwarded, {body:/json/pointer} a value of the original body.",
          ),
          headers: opt(
            z.record(headerName, z.string()),
            "Headers the probe sends (${ENV} interpolated); absent: a retry's own headers, when one triggers it.",
          ),
        },
        'probe request settings (method, path, headers)',
      ),
      'The HTTP request that asks the upstream whether the call happened (REST routes).',
    ),
    tool: opt(
      strict(
        {
          name: z.string({ error: 'expected a tool name' }).min(1).describe('The tool to call.'),
          arguments: opt(
            z.record(z.string(), z.unknown()),
            'Its arguments; strings may hold {key} and {arguments:/json/pointer} (a value of the original call).',
          ),
        },
        'probe tool settings (name, arguments)',
      ),
      'The tool call that asks an MCP server whether the call happened (MCP routes).',
    ),
    found: opt(
      strict(
        {
          status: opt(statusList, 'Probe statuses that may mean found.', [200]),
          exists: opt(jsonPointer, 'A pointer the probe body must have to mean found.'),
        },
        'found settings (status, exists)',
      ),
      'When the probe says the call happened.',
    ),
    notFound: opt(
      strict(
        {
          status: opt(statusList, 'Probe statuses that mean not found.', [404]),
        },
        'notFound settings (status)',
      ),
      'When the probe says the call never happened (also: a found status without exists).',
    ),
    answer: opt(
      strict(
        {
          status: opt(status, "The status repeats get (default: the probe's)."),
          body: opt(jsonPointer, 'The part of the probe body repeats get (default: all of it).'),
        },
        'answer settings (status, body)',
      ),
      'What every repeat gets once found.',
    ),
    after: opt(
      duration({ positive: true }),
      "How long after the original was sent a probe may be trusted to say not found; at least the upstream's timeout.",
      '5s',
    ),
    every: opt(
      // 0 written bare, as the docs write it, is 0s.
      z.preprocess((value: unknown) => (value === 0 ? '0s' : value), duration({})),
      'How often the background sweep probes unknown outcomes; 0 = only when a retry arrives.',
      '30s',
    ),
    giveUpAfter: opt(
      duration({ positive: true }),
      'Stop probing a record this long after the original was sent; it stays unknown for an operator.',
      '24h',
    ),
  },
  'reconcile settings (request or tool, found, notFound, answer, after, every, giveUpAfter)',
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

// TLS material is named by file (PEM), relative to the config file's directory; compile.ts reads
// and checks the files, so a bad one is an error at its line before anything listens.
const pemFile = pattern(/./, 'expected a path to a PEM file', 'PEM file');

function listenerTls(what: string) {
  return opt(
    strict(
      {
        cert: pemFile.describe(`The ${what} certificate (chain), PEM.`),
        key: pemFile.describe('Its private key, PEM.'),
        ca: opt(pemFile, 'CA certificates client certificates must chain to (clientAuth).'),
        clientAuth: opt(
          z.enum(['none', 'request', 'require'], {
            error: 'expected none, request or require',
          }),
          'Client certificates: none; request (asked for, not required); require (refused without one from ca).',
          'none',
        ),
      },
      'TLS settings (cert, key, ca, clientAuth)',
    ),
    `Serve ${what} over TLS (HTTPS, ALPN http/1.1); SIGHUP re-reads cert, key and ca.`,
  );
}

const upstreamTls = strict(
  {
    ca: opt(
      pemFile,
      "CA certificates the upstream's certificate must chain to (instead of the system's).",
    ),
    cert: opt(pemFile, 'Client certificate for upstreams that require one (mTLS), PEM.'),
    key: opt(pemFile, 'Its private key, PEM.'),
    servername: opt(
      pattern(/^[^\s/:]+$/, 'expected a host name', 'host name'),
      "Host name sent (SNI) and verified instead of the URL's.",
    ),
    rejectUnauthorized: opt(
      bool,
      'false accepts any certificate (testing only: anyone on the path can answer).',
      true,
    ),
  },
  'upstream TLS settings (ca, cert, key, servername, rejectUnauthorized)',
);

const storeTls = strict(
  {
    mode: opt(
      z.enum(['require', 'verify-ca', 'verify-full'], {
        error: 'expected require, verify-ca or verify-full',
      }),
      "require: encrypted, server not verified (with a ca: as verify-ca, like libpq); verify-ca: its certificate chains to ca; verify-full: and names the URL's host.",
      'verify-full',
    ),
    ca: opt(pemFile, "CA certificates the server's certificate must chain to (else the system's)."),
    cert: opt(pemFile, 'Client certificate, for servers that ask for one (hostssl … cert), PEM.'),
    key: opt(pemFile, 'Its private key, PEM.'),
  },
  'store TLS settings (mode, ca, cert, key)',
);

const upstreamSchema = strict(
  {
    url: upstreamUrl.describe(
      'http(s)://host:port[/base]; a base path is prepended to forwarded paths.',
    ),
    timeout: timer
      .default('30s')
      .describe('No response headers (or a stalled body) within this → 504, outcome unknown.'),
    tls: opt(upstreamTls, 'TLS towards an https:// upstream (every path, websockets included).'),
  },
  'upstream settings (url, timeout, tls)',
);

// Asymmetric algorithms only: a JWKS holds public keys, and an HMAC secret shared with every
// client would let any of them mint another's principal.
const JWT_ALGORITHMS = [
  'RS256',
  'RS384',
  'RS512',
  'PS256',
  'PS384',
  'PS512',
  'ES256',
  'ES384',
  'ES512',
  'EdDSA',
  'Ed25519',
] as const;
const oneOrMore = (what: string) =>
  z.union([quotedText, z.array(quotedText).min(1, { error: `expected at least one ${what}` })], {
    error: `expected ${what} or a list of them`,
  });

const jwtSchema = strict(
  {
    jwks: pattern(
      /^\S+$/,
      'expected an https:// URL of a JSON Web Key Set, or a path to a JWKS file',
      'URL or file',
    ).describe(
      "The issuer's public keys: an http(s):// URL (fetched, cached, fetched again for an unknown kid) or a JWKS file, relative to the config file.",
    ),
    issuer: oneOrMore('an issuer').describe(
      'Accepted iss values (exact match), e.g. https://auth.example.com/.',
    ),
    audience: oneOrMore('an audience').describe(
      'Accepted aud values: a token minted for another service is refused.',
    ),
    algorithms: opt(
      z
        .array(z.enum(JWT_ALGORITHMS, { error: `expected one of ${JWT_ALGORITHMS.join(', ')}` }))
        .min(1, { error: 'expected at least one algorithm' }),
      'Accepted signature algorithms (asymmetric only).',
      ['RS256', 'ES256'],
    ),
    clockSkew: opt(duration({}), 'Leeway for exp and nbf between the issuer and this host.', '30s'),
    cooldown: opt(
      duration({}),
      'After a fetch, how long a token with an unknown kid is refused before the URL is fetched again.',
      '30s',
    ),
    refresh: opt(
      timer,
      'How often the URL is fetched again in the background (a failed fetch keeps the keys it had).',
      '10m',
    ),
  },
  'JWT settings (jwks, issuer, audience, algorithms, clockSkew, cooldown, refresh)',
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
        tls: listenerTls('proxy'),
      },
      'listen settings (host, port, maxRequestHeaders, tls)',
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
              .describe('Memory those pending answers may hold; past it the oldest are dropped.'),
            holdAnswer: duration({ timer: true })
              .default('2s')
              .describe(
                "How long a client's answer waits for its failed completion to land before it is sent anyway (the proxy keeps trying).",
              ),
            drainTimeout: duration({ timer: true })
              .default('5s')
              .describe(
                'How long shutdown keeps sending pending writes, after draining requests; what is left is logged.',
              ),
          },
          'store.outbox settings (maxWrites, maxBytes, holdAnswer, drainTimeout)',
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
  'config sections (listen, shutdownGrace, workers, admin, store, upstreams, trustedProxies, auth, defaults, routes)',
);

export type ParsedConfig = z.output<typeof configSchema>;
export type ParsedRoute = ParsedConfig['routes'][number];
export type IdempotencyBlock = z.output<typeof idempotencySchema>;
