// Turns the zod-parsed config into the frozen ProxyConfig of types.ts: cross-field checks first
// (each issue at its own YAML path), then defaults merged into every protected route, units
// converted, upstream URLs split, and `storesStatus` built as a lookup table. Nothing on the
// request path re-checks any of this.
import os from 'node:os';
import path from 'node:path';
import { ConfigError, type ConfigIssue } from '../errors';
import { DERIVED_KEY_LENGTH, DERIVED_KEY_PREFIX } from '../idempotency/derived-key';
import { fingerprintEpoch } from '../idempotency/fingerprint';
import type { IdempotencyBlock, ParsedConfig, ParsedRoute } from '../config/schema';
import { IDEMPOTENCY_DEFAULTS as BUILT_IN } from '../config/schema-formats';
import type {
  IdempotencyPolicy,
  ProxyConfig,
  RequestPart,
  RouteConfig,
  UpstreamConfig,
  UpstreamTlsConfig,
} from '../config/types';
import { readServerTls, readStoreTls, readUpstreamTls } from '../config/tls-files';
import { parseJsonPointer } from '../idempotency/json-pointer';
import { JWT_PREFIX } from '../idempotency/tenant';
import { SAFE_METHODS } from '../config/types';
import { parseDurationMs, parseSizeBytes } from '../config/units';
import { inheritedValue, mergedBlock, settingOf } from '../config/setting';
import { checkA2aRoute } from './a2a-config';
import { checkJwtTenants, compileJwt } from './jwt-config';
import { checkMcpRoute, compileMcp, keyMaxLength } from './mcp-config';
import { checkAsync, compileLongCall } from './long-call-config';
import { checkReconcile, compileReconcile } from './reconcile-config';
import { problemJson } from '../http/problem';
import { PROFILES } from '../profiles';
import { applyProfile } from '../profiles/apply';
import { checkProfileRoute } from '../profiles/check';
import { formatPath, type IssuePath, type PathIssue } from '../config/path-issue';

export type Locate = (issue: PathIssue) => Pick<ConfigIssue, 'line' | 'column'>;

export interface CompileOptions {
  /** The config file, for ConfigError and ProxyConfig.file (resolved against cwd). */
  readonly file: string;
  /** `DATABASE_URL` here overrides `store.url`. Default: process.env. */
  readonly env?: NodeJS.ProcessEnv;
  /** Base of a relative `store.dataDir`. Default: process.cwd(). */
  readonly cwd?: string;
  /** Source positions of paths; load.ts passes the YAML document's. */
  readonly locate?: Locate;
}

export function compileConfig(parsed: ParsedConfig, options: CompileOptions): ProxyConfig {
  const issues = unique([...checkConfig(parsed), ...rejectUnsupportedFeatures(parsed)]);
  if (issues.length > 0) throw new ConfigError(options.file, locateAll(issues, options));
  const env = options.env ?? process.env;
  const cwd = options.cwd ?? process.cwd();
  const file = path.resolve(cwd, options.file);
  const tls = readTlsFiles(parsed, path.dirname(file), env.DATABASE_URL || parsed.store.url);
  const jwt = compileJwt(parsed.auth?.jwt, path.dirname(file), tls.issues);
  if (tls.issues.length > 0) throw new ConfigError(options.file, locateAll(tls.issues, options));
  const upstreams = new Map<string, UpstreamConfig>();
  for (const [name, upstream] of Object.entries(parsed.upstreams)) {
    const url = new URL(upstream.url);
    const basePath = url.pathname.replace(/\/+$/, '');
    upstreams.set(name, {
      name,
      origin: url.origin,
      basePath,
      timeoutMs: parseDurationMs(upstream.timeout),
      tls: tls.upstreams.get(name),
    });
  }
  const routes = parsed.routes.map((route): RouteConfig => ({
    name: route.name,
    match: {
      methods: route.match.method === undefined ? null : new Set(methodsOf(route)),
      path: route.match.path,
      host: route.match.host?.toLowerCase() ?? null,
      strict: route.match.strict ?? false,
      formats: [...new Set(route.match.formats ?? [])],
    },
    upstream: upstreams.get(route.upstream)!,
    stripPrefix: route.stripPrefix ?? null,
    methodOverride: route.methodOverride ?? false,
    idempotency: resolvePolicy(route, parsed.defaults),
  }));
  const { store, admin } = parsed;
  return deepFreeze({
    file,
    listen: {
      host: parsed.listen.host,
      port: parsed.listen.port,
      maxRequestHeaders: parsed.listen.maxRequestHeaders,
      maxBodyBytesInFlight: parseSizeBytes(parsed.listen.maxBodyBytesInFlight),
      tls: tls.listen,
    },
    shutdownGraceMs: parseDurationMs(parsed.shutdownGrace),
    workers: parsed.workers === 'auto' ? os.availableParallelism() : parsed.workers,
    heapTargetBytes: parseSizeBytes(parsed.heapTarget),
    admin: { host: admin.host, port: admin.port, token: admin.token || undefined, tls: tls.admin },
    store: {
      url: env.DATABASE_URL || store.url || undefined,
      dataDir: path.resolve(cwd, store.dataDir),
      table: store.table,
      poolSize: store.poolSize,
      pruneIntervalMs: parseDurationMs(store.pruneInterval),
      replayCacheBytes: parseSizeBytes(store.replayCache),
      listenProbeIntervalMs: parseDurationMs(store.listenProbeInterval),
      listenProbeTimeoutMs: parseDurationMs(store.listenProbeTimeout),
      synchronousCommit: store.synchronousCommit,
      migrate: store.migrate,
      tls: tls.store,
      outbox: {
        maxWrites: store.outbox.maxWrites,
        maxBytes: parseSizeBytes(store.outbox.maxBytes),
        holdMs: parseDurationMs(store.outbox.holdAnswer),
        drainTimeoutMs: parseDurationMs(store.outbox.drainTimeout),
        spool: spoolDir(store.outbox.spool, env.DATABASE_URL || store.url, store.dataDir, cwd),
        spoolMaxBytes: parseSizeBytes(store.outbox.spoolMaxBytes),
      },
    },
    upstreams,
    trustedProxies: [...parsed.trustedProxies],
    auth: { jwt },
    routes,
  });
}

function locateAll(issues: readonly PathIssue[], options: CompileOptions): ConfigIssue[] {
  const locate = options.locate ?? (() => ({ line: undefined, column: undefined }));
  return issues.map((issue) => ({
    path: formatPath(issue.path),
    ...locate(issue),
    message: issue.message,
  }));
}

/** Every TLS file the config names, read and checked (tls-files.ts); relative to the config's directory. */
function readTlsFiles(parsed: ParsedConfig, baseDir: string, storeUrl: string) {
  const issues: PathIssue[] = [];
  const upstreams = new Map<string, UpstreamTlsConfig>();
  for (const [name, upstream] of Object.entries(parsed.upstreams)) {
    const at = ['upstreams', name, 'tls'];
    const read = readUpstreamTls(upstream.tls, upstream.url, baseDir, at, issues);
    if (read) upstreams.set(name, read);
  }
  return {
    listen: readServerTls(parsed.listen.tls, baseDir, ['listen', 'tls'], issues),
    admin: readServerTls(parsed.admin.tls, baseDir, ['admin', 'tls'], issues),
    upstreams,
    store: readStoreTls(parsed.store.tls, storeUrl || undefined, ['store', 'url'], baseDir, issues),
    issues,
  };
}

/**
 * Features that are part of the config contract but not implemented in this version, one issue
 * each at the path where the value is written (in `defaults` once, not once per route inheriting
 * it). None right now.
 */
export function rejectUnsupportedFeatures(_parsed: ParsedConfig): PathIssue[] {
  return [];
}

/** Checks that span several fields (or need a URL parser); single-field formats are the schema's. */
export function checkConfig(parsed: ParsedConfig): PathIssue[] {
  const issues: PathIssue[] = [];
  const add = (path: IssuePath, message: string) => issues.push({ path, message });
  for (const [name, upstream] of Object.entries(parsed.upstreams)) {
    const problem = upstreamUrlProblem(upstream.url);
    if (problem) add(['upstreams', name, 'url'], problem);
  }
  const upstreamNames = Object.keys(parsed.upstreams);
  const known = upstreamNames.length
    ? `expected one of: ${upstreamNames.join(', ')}`
    : 'none is defined';
  const firstByName = new Map<string, number>();
  parsed.routes.forEach((route, i) => {
    const at = ['routes', i] as const;
    const first = firstByName.get(route.name);
    if (first === undefined) firstByName.set(route.name, i);
    else
      add(
        [...at, 'name'],
        `duplicate route name "${route.name}"; routes[${first}] already uses it`,
      );
    if (!upstreamNames.includes(route.upstream))
      add([...at, 'upstream'], `unknown upstream "${route.upstream}"; ${known}`);
    if (route.stripPrefix !== undefined && !isLiteralPrefix(route.stripPrefix, route.match.path))
      add(
        [...at, 'stripPrefix'],
        `expected a prefix of match.path "${route.match.path}" made of its literal segments (every path the route matches must start with it)`,
      );
    issues.push(...checkProtectedRoute(route, parsed.defaults, at));
  });
  issues.push(...checkJwtTenants(parsed));
  issues.push(...checkReconcile(parsed));
  if (parsed.defaults?.mcp !== undefined)
    add(
      ['defaults', 'mcp'],
      'mcp marks one route as fronting an MCP server; set it on that route, not in defaults',
    );
  if (parsed.defaults?.profile !== undefined)
    add(
      ['defaults', 'profile'],
      "profile makes one route speak a commerce protocol's contract; set it on that route, not in defaults",
    );
  if (parsed.defaults?.a2a !== undefined)
    add(
      ['defaults', 'a2a'],
      'a2a marks one route as fronting an A2A agent; set it on that route, not in defaults',
    );
  const { listen, admin } = parsed;
  const anyHost = (host: string) => host === '0.0.0.0' || host === '::';
  const sameHost = listen.host === admin.host || anyHost(listen.host) || anyHost(admin.host);
  if (listen.port !== 0 && listen.port === admin.port && sameHost)
    add(['admin', 'port'], 'expected a port other than listen.port');
  return issues;
}

function checkProtectedRoute(
  route: ParsedRoute,
  defaults: IdempotencyBlock | undefined,
  at: IssuePath,
): PathIssue[] {
  const own = route.idempotency;
  if (own === undefined || own === false) return [];
  const block = own === true ? {} : own;
  const issues: PathIssue[] = [];
  const listed = route.match.method ?? [];
  if (!(inheritedValue(block, defaults, (b) => b.allowSafeMethods) ?? BUILT_IN.allowSafeMethods)) {
    (Array.isArray(listed) ? listed : [listed]).forEach((method, j) => {
      const upper = method.toUpperCase();
      if (!SAFE_METHODS.has(upper)) return;
      issues.push({
        path: [...at, 'match', 'method', ...(Array.isArray(listed) ? [j] : [])],
        message: `${upper} is a safe method and already idempotent; a protected route may list it only with idempotency.allowSafeMethods: true (unlisted, it passes through)`,
      });
    });
  }
  if (block.profile !== undefined)
    issues.push(...checkProfileRoute(PROFILES[block.profile], block, defaults, at, BUILT_IN.ttl));
  issues.push(...checkAsync(block, at));
  if (block.a2a !== undefined) return [...issues, ...checkA2aRoute(block, at)];
  if (block.mcp !== undefined) return [...issues, ...checkMcpRoute(block, defaults, at)];
  const path = [...at, 'idempotency'];
  const derive = inheritedValue(block, defaults, (b) => b.key?.derive);
  const window = settingOf(block, defaults, path, (b) => b.key?.window, ['key', 'window']);
  if (window !== undefined && derive === undefined) {
    issues.push({
      path: window.path,
      message:
        'key.window is only allowed together with key.derive (it is a derived key’s lifetime)',
    });
  }
  // A derived key is stored, logged and forwarded like a sent one, so it must fit the same limit.
  const maxLength = keyMaxLength(block, defaults, path);
  if (derive !== undefined && maxLength.value < DERIVED_KEY_LENGTH) {
    issues.push({
      path: maxLength.path,
      message: `expected at least ${DERIVED_KEY_LENGTH} with key.derive: a derived key ("${DERIVED_KEY_PREFIX}" and a base64url SHA-256) is ${DERIVED_KEY_LENGTH} characters long`,
    });
  }
  return issues;
}

/** True when every path `pattern` matches starts with `prefix` (whole segments, all literal). */
function isLiteralPrefix(prefix: string, pattern: string): boolean {
  const want = prefix.split('/');
  const have = pattern.split('/');
  return want.every((segment, i) => {
    const own = have[i];
    return own === segment && !own.startsWith(':') && own !== '**';
  });
}

/** Why `text` cannot be an upstream URL (an origin plus an optional base path), if it cannot. */
function upstreamUrlProblem(text: string): string | undefined {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return 'expected an http:// or https:// URL like "http://127.0.0.1:4000"';
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    return 'expected an http:// or https:// URL';
  if (url.username || url.password) return 'expected a URL without credentials';
  if (url.search || url.hash || /[?#]/.test(text))
    return 'expected a URL without a query or fragment';
  return undefined;
}

function unique(issues: PathIssue[]): PathIssue[] {
  const seen = new Set<string>();
  return issues.filter((issue) => {
    const id = `${formatPath(issue.path)}\n${issue.message}`;
    return seen.has(id) ? false : (seen.add(id), true);
  });
}

function methodsOf(route: ParsedRoute): string[] {
  const listed = route.match.method ?? [];
  return (Array.isArray(listed) ? listed : [listed]).map((method) => method.toUpperCase());
}

// Nested `key`, `fingerprint` and `streams` merge field by field (docs/README.md#small-rules);
// every other field is the route's own, else the defaults' (config/setting.ts), else built in.
function resolvePolicy(
  route: ParsedRoute,
  defaults: IdempotencyBlock | undefined,
): IdempotencyPolicy | null {
  const own = route.idempotency;
  if (own === undefined || own === false) return null;
  const block: IdempotencyBlock = own === true ? {} : own;
  const pick = <K extends keyof IdempotencyBlock>(field: K) =>
    inheritedValue(block, defaults, (b) => b[field]);
  const key = mergedBlock(BUILT_IN.key, block, defaults, (b) => b.key);
  const streams = mergedBlock(BUILT_IN.streams, block, defaults, (b) => b.streams);
  const fingerprint = mergedBlock(BUILT_IN.fingerprint, block, defaults, (b) => b.fingerprint);
  const forwardKeyAs =
    key.forward === 'none' ? false : (pick('forwardKeyAs') ?? BUILT_IN.forwardKeyAs);
  // Header names are case-insensitive, claim names are not.
  const tenant = (pick('tenant') ?? []).map((part) =>
    part.startsWith(JWT_PREFIX) ? part : part.toLowerCase(),
  );
  const mcp = block.mcp === undefined ? null : compileMcp(block.mcp);
  const parts = mcp ? [] : fingerprint.parts.map(compilePart);
  const derive = mcp ? null : (key.derive?.map(compilePart) ?? null);
  const window = block.mcp?.window ?? key.window;
  const fingerprintPolicy = {
    parts,
    ignore: mcp ? [] : fingerprint.ignore.map((field) => field.split('.').slice(1)),
  };
  const policy: IdempotencyPolicy = {
    scope: pick('group') ?? route.name,
    key: {
      header: key.header.toLowerCase(),
      forward: forwardKeyAs === false ? 'none' : key.forward,
      required: key.required,
      maxLength: key.maxLength,
      body: key.body === undefined ? null : parseJsonPointer(key.body),
      bodyPointer: key.body ?? null,
      derive,
      windowMs: window === undefined ? null : parseDurationMs(window),
    },
    forwardKeyAs: forwardKeyAs === false ? null : forwardKeyAs,
    ttlMs: parseDurationMs(pick('ttl') ?? BUILT_IN.ttl),
    lockTimeoutMs: parseDurationMs(pick('lockTimeout') ?? BUILT_IN.lockTimeout),
    unknownOutcome: pick('unknownOutcome') ?? BUILT_IN.unknownOutcome,
    // A tool call's retry usually comes while the first still runs (the client timed out): on MCP
    // routes it waits for the result instead of getting an error the agent may not understand.
    onConcurrent: pick('onConcurrent') ?? (mcp ? 'wait' : BUILT_IN.onConcurrent),
    waitTimeoutMs: parseDurationMs(pick('waitTimeout') ?? BUILT_IN.waitTimeout),
    maxWaitersPerKey: pick('maxWaitersPerKey') ?? BUILT_IN.maxWaitersPerKey,
    streams: {
      contentTypes: new Set(streams.contentTypes.map((type) => type.toLowerCase())),
      chunked: streams.chunked,
    },
    fingerprint: fingerprintPolicy,
    fingerprintEpoch: fingerprintEpoch(fingerprintPolicy, mcp?.ignore),
    tenant,
    tenantClaims: tenant.flatMap((part) =>
      part.startsWith(JWT_PREFIX) ? [part.slice(JWT_PREFIX.length)] : [],
    ),
    storesStatus: compileStoresStatus(
      pick('store') ?? BUILT_IN.store,
      pick('release') ?? BUILT_IN.release,
    ),
    maxRequestBytes: parseSizeBytes(pick('maxRequestBytes') ?? BUILT_IN.maxRequestBytes),
    maxResponseBytes: parseSizeBytes(pick('maxResponseBytes') ?? BUILT_IN.maxResponseBytes),
    replayedHeader: pick('replayedHeader') ?? BUILT_IN.replayedHeader,
    enforce: pick('enforce') ?? BUILT_IN.enforce,
    allowSafeMethods: pick('allowSafeMethods') ?? BUILT_IN.allowSafeMethods,
    replaySetCookie: pick('replaySetCookie') ?? BUILT_IN.replaySetCookie,
    logKey: pick('logKey') ?? BUILT_IN.logKey,
    dropReplayHeaders: new Set(
      (pick('dropReplayHeaders') ?? BUILT_IN.dropReplayHeaders).map((name) => name.toLowerCase()),
    ),
    readsHeaders: new Set([
      key.header.toLowerCase(),
      ...tenant.flatMap((part) =>
        part.startsWith(JWT_PREFIX) ? ['authorization'] : [part.slice('header:'.length)],
      ),
      ...[...parts, ...(derive ?? [])].flatMap((part) =>
        part.kind === 'header' ? [part.name] : [],
      ),
      // Whether a body is hashed as canonical JSON depends on its Content-Type.
      ...([...parts, ...(derive ?? [])].some((part) => part.kind === 'body')
        ? ['content-type']
        : []),
    ]),
    mcp,
    a2a: block.a2a === undefined ? null : {},
    reconcile: block.reconcile === undefined ? null : compileReconcile(block.reconcile),
    // In defaults it applies to the REST routes: MCP and A2A routes answer in their own messages.
    async: longCallOf(
      mcp === null && block.a2a === undefined && block.profile === undefined
        ? pick('async')
        : undefined,
    ),
    profile: null,
    errorShape: problemJson,
    echoKeyAs: null,
    scopeByPath: false,
  };
  return block.profile === undefined ? policy : applyProfile(policy, PROFILES[block.profile]);
}

function longCallOf(block: IdempotencyBlock['async']): IdempotencyPolicy['async'] {
  return block === undefined ? null : compileLongCall(block);
}

/** A status is stored when `store` lists it or its class, and `release` does not list it. */
export function compileStoresStatus(
  store: readonly (string | number)[],
  release: readonly number[],
): (status: number) => boolean {
  const table = new Uint8Array(600);
  for (const entry of store) {
    if (typeof entry === 'number') table[entry] = 1;
    else table.fill(1, Number(entry[0]) * 100, Number(entry[0]) * 100 + 100);
  }
  for (const status of release) table[status] = 0;
  return (status) => table[status] === 1;
}

function compilePart(text: string): RequestPart {
  if (text === 'method' || text === 'path' || text === 'query' || text === 'body')
    return { kind: text };
  if (text.startsWith('body.')) return { kind: 'body-field', path: text.split('.').slice(1) };
  if (text.startsWith('header:')) return { kind: 'header', name: text.slice(7).toLowerCase() };
  return { kind: 'query-param', name: text.slice('query.'.length) };
}

function deepFreeze<T>(value: T): T {
  if (typeof value !== 'object' || value === null || Object.isFrozen(value)) return value;
  if (value instanceof Map) for (const entry of value.values()) deepFreeze(entry);
  else if (value instanceof Set) return Object.freeze(value);
  else for (const field of Object.values(value)) deepFreeze(field);
  return Object.freeze(value);
}

/**
 * The spool's directory: the one set; none when set to false; unset, the embedded PostgreSQL's
 * beside its data directory (on a store URL: none, as the operator must choose a disk that
 * outlives the process, docs/record-lifecycle.md).
 */
function spoolDir(
  setting: string | false | undefined,
  url: string,
  dataDir: string,
  cwd: string,
): string | undefined {
  if (setting === false) return undefined;
  if (setting !== undefined) return path.resolve(cwd, setting);
  return url ? undefined : `${path.resolve(cwd, dataDir)}-spool`;
}
