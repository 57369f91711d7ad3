// The resolved view `idempotency-proxy check` prints: what the proxy will actually do with this
// config once defaults are merged, in match order, so an operator can read a route's policy
// without redoing the merge in their head. Secrets (the database password, the admin token) are
// never printed.
import type {
  JwtConfig,
  IdempotencyPolicy,
  ProxyConfig,
  RequestPart,
  RouteConfig,
  ServerTlsConfig,
  StoreTlsConfig,
  UpstreamTlsConfig,
} from '../config/types';
import { upstreamPath } from '../http/router';
import { SAFE_METHODS } from '../config/types';
import { formatDuration, formatSize } from '../config/units';
import { maskPassword } from '../db/masked-url';

/**
 * `embeddedDataDir`: where the embedded PostgreSQL's data really is, when that is not the configured
 * `store.dataDir` (as root, in a directory the server's user cannot enter).
 */
export function describeConfig(config: ProxyConfig, embeddedDataDir?: string): string {
  const { listen, admin, store } = config;
  const placed =
    embeddedDataDir === undefined || embeddedDataDir === store.dataDir
      ? store.dataDir
      : `${embeddedDataDir} (store.dataDir ${store.dataDir} is out of the server user's reach)`;
  const lines = [
    `config: ${config.file}`,
    `listen: ${scheme(listen.tls)}${listen.host}:${listen.port} (shutdown grace ${formatDuration(config.shutdownGraceMs)})`,
    ...describeServerTls(listen.tls),
    ...(config.workers > 1
      ? [`workers: ${config.workers} processes (node:cluster), one admin listener in the primary`]
      : []),
    `admin: ${scheme(admin.tls)}${admin.host}:${admin.port}, /keys ${admin.token ? 'on (bearer token set)' : 'off (no admin.token)'}`,
    ...describeServerTls(admin.tls),
    `store: ${store.url ? maskPassword(store.url) : `embedded PostgreSQL at ${placed}`}`,
    `  table ${store.table}, pool ${store.poolSize}, prune every ${formatDuration(store.pruneIntervalMs)}, ${store.migrate ? 'migrated by serve at start' : 'not migrated by serve (store.migrate: false; run idempotency-proxy migrate)'}`,
    ...describeStoreTls(store.tls),
    'upstreams:',
    ...[...config.upstreams.values()].flatMap((u) => [
      `  ${u.name}: ${u.origin}${u.basePath} (timeout ${formatDuration(u.timeoutMs)})`,
      ...describeUpstreamTls(u.tls),
    ]),
    ...(config.trustedProxies.length > 0
      ? [
          `trusted proxies (their X-Forwarded-Host/-Proto kept): ${config.trustedProxies.join(', ')}`,
        ]
      : []),
    ...describeJwt(config.auth.jwt),
    'routes (first match wins):',
  ];
  config.routes.forEach((route, i) => lines.push(...describeRoute(route, i + 1)));
  return lines.join('\n');
}

function scheme(tls: ServerTlsConfig | undefined): string {
  return tls ? 'https://' : 'http://';
}

const clientAuthText = {
  none: 'no client certificates',
  request: 'client certificates asked for, not required',
  require: 'a client certificate from the ca required',
} as const;

function describeServerTls(tls: ServerTlsConfig | undefined): string[] {
  if (!tls) return [];
  return [
    `  TLS: cert ${tls.cert.file}, key ${tls.key.file}${tls.ca ? `, ca ${tls.ca.file}` : ''}; ${clientAuthText[tls.clientAuth]}; SIGHUP re-reads them`,
  ];
}

const storeModeText = {
  require: 'encrypted, server certificate not verified',
  'verify-ca': 'server certificate must chain to the CA (host name not checked)',
  'verify-full': 'server certificate must chain to the CA and name the host',
} as const;

function describeStoreTls(tls: StoreTlsConfig | undefined): string[] {
  if (!tls) return ['  TLS: off (plain connection)'];
  const files = [
    // require checks no certificate: naming a CA would suggest it does.
    ...(tls.mode === 'require' ? [] : [`ca ${tls.ca?.file ?? "the system's"}`]),
    ...(tls.cert ? [`client cert ${tls.cert.file}`] : []),
  ];
  return [
    `  TLS: ${tls.mode} (${storeModeText[tls.mode]})${files.length ? `; ${files.join(', ')}` : ''}`,
  ];
}

function describeUpstreamTls(tls: UpstreamTlsConfig | undefined): string[] {
  if (!tls) return [];
  const parts = [
    `ca ${tls.ca?.file ?? "the system's"}`,
    ...(tls.cert ? [`client cert ${tls.cert.file}`] : []),
    ...(tls.servername ? [`server name ${tls.servername}`] : []),
    tls.rejectUnauthorized ? 'verified' : 'NOT VERIFIED (rejectUnauthorized: false)',
  ];
  return [`    TLS: ${parts.join(', ')}`];
}

function describeRoute(route: RouteConfig, position: number): string[] {
  const { match, idempotency: policy } = route;
  const methods = match.methods === null ? 'any method' : [...match.methods].join(',');
  const host = match.host === null ? '' : ` host ${match.host}`;
  const head = `  ${position}. ${route.name}: ${methods}${host} ${match.path} → ${route.upstream.name} ${forwardedPath(route)}`;
  const override = route.methodOverride
    ? ['     routes by X-HTTP-Method-Override & co. (methodOverride), and forwards them']
    : [];
  const formats =
    match.formats.length > 0
      ? [`     also matches a .${match.formats.join('/.')} suffix (formats)`]
      : [];
  if (policy === null)
    return [head, '     pass-through (forwarded untouched)', ...formats, ...override];
  const unsafe =
    match.methods === null
      ? ' (POST, PUT, PATCH, DELETE; safe methods pass through)'
      : [...match.methods].some((m) => SAFE_METHODS.has(m))
        ? ' (safe methods too: allowSafeMethods)'
        : '';
  const matching = `${
    match.strict ? 'exact path match (strict)' : 'also matches a trailing slash and any letter case'
  }${match.formats.length > 0 ? `, and a .${match.formats.join('/.')} suffix (formats)` : ''}`;
  return [
    head,
    `     protected${unsafe}; ${matching}`,
    ...override,
    ...describePolicy(policy).map((line) => `       ${line}`),
  ];
}

/** auth.jwt, as `check` shows it: where the keys come from and what a token must say. */
function describeJwt(jwt: JwtConfig | null): string[] {
  if (jwt === null) return [];
  const keys =
    jwt.jwks.kind === 'url'
      ? `${jwt.jwks.url} (refreshed every ${formatDuration(jwt.refreshMs)}; an unknown kid at most every ${formatDuration(jwt.cooldownMs)})`
      : `${jwt.jwks.file} (${jwt.jwks.keySet.keys.length} keys)`;
  return [
    `bearer tokens (auth.jwt): keys ${keys}`,
    `  issuer ${jwt.issuer.join(' or ')}, audience ${jwt.audience.join(' or ')}, ${jwt.algorithms.join('/')}, clock skew ${formatDuration(jwt.clockSkewMs)}`,
  ];
}

function describePolicy(policy: IdempotencyPolicy): string[] {
  const { key, fingerprint } = policy;
  const tenant = policy.tenant.length > 0 ? `, per tenant (${policy.tenant.join(', ')})` : '';
  const forwarded =
    policy.forwardKeyAs === null
      ? 'not forwarded (key.forward: none)'
      : key.forward === 'scoped'
        ? `forwarded as ${policy.forwardKeyAs}: a hash of scope, tenant and key (key.forward: scoped)`
        : `forwarded as ${policy.forwardKeyAs}, as sent, the same for every tenant (key.forward: raw)`;
  const ignore = fingerprint.ignore.map((field) => `body.${field.join('.')}`);
  return [
    `scope: ${policy.scope}${tenant}`,
    `key: header ${key.header}${key.bodyPointer === null ? '' : ` (else the body's ${key.bodyPointer})`}, ${key.required ? 'required' : 'optional'}, at most ${key.maxLength} chars; ${forwarded}`,
    `ttl ${formatDuration(policy.ttlMs)}, lockTimeout ${formatDuration(policy.lockTimeoutMs)}, unknownOutcome ${policy.unknownOutcome}, onConcurrent ${policy.onConcurrent} (waitTimeout ${formatDuration(policy.waitTimeoutMs)})`,
    `fingerprint: ${fingerprint.parts.map(describePart).join(', ')}${ignore.length > 0 ? `; ignoring ${ignore.join(', ')}` : ''}`,
    `stores: ${describeStored(policy.storesStatus)}`,
    `limits: request ${formatSize(policy.maxRequestBytes)}, stored response ${formatSize(policy.maxResponseBytes)}; replay marker ${policy.replayedHeader}${policy.replaySetCookie ? '; replays Set-Cookie' : ''}`,
    `streams: ${[...policy.streams.contentTypes].join(', ')}${policy.streams.chunked ? ', and any answer sent chunked with no Content-Length' : ''} (sent on as they arrive)`,
    `never replayed: date (sent fresh)${[...policy.dropReplayHeaders].map((name) => `, ${name}`).join('')}`,
    ...(key.derive
      ? [
          `no key sent: derived from ${key.derive.map(describePart).join(', ')}, valid for ${formatDuration(key.windowMs ?? policy.ttlMs)}`,
        ]
      : []),
    ...(policy.enforce
      ? []
      : ['SHADOW MODE (enforce: false): forwards everything, logs what it would have done']),
    ...(policy.logKey === 'hash' ? ['logs show a hash of the key'] : []),
  ];
}

/** The path the upstream receives for the route's own pattern, as http/router.ts rewrites it. */
function forwardedPath(route: RouteConfig): string {
  return upstreamPath(route, { path: route.match.path, query: '' }) ?? route.match.path;
}

function describePart(part: RequestPart): string {
  switch (part.kind) {
    case 'body-field':
      return `body.${part.path.join('.')}`;
    case 'header':
      return `header:${part.name}`;
    case 'query-param':
      return `query.${part.name}`;
    default:
      return part.kind;
  }
}

/**
 * Rebuilds a summary from the compiled predicate (the lists are not kept): a class stored for at
 * least half its codes prints as "4xx" with the exceptions named, other stored codes one by one.
 */
export function describeStored(storesStatus: (status: number) => boolean): string {
  const classes: string[] = [];
  const singles: number[] = [];
  const except: number[] = [];
  for (let base = 100; base < 600; base += 100) {
    const codes = Array.from({ length: 100 }, (_, i) => base + i);
    const stored = codes.filter(storesStatus);
    if (stored.length >= 50) {
      classes.push(`${base / 100}xx`);
      except.push(...codes.filter((code) => !storesStatus(code)));
    } else singles.push(...stored);
  }
  const listed = [...classes, ...singles.map(String)];
  if (listed.length === 0) return 'nothing';
  return `${listed.join(', ')}${except.length > 0 ? ` except ${except.join(', ')}` : ''}`;
}
