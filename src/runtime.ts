// Everything compiled from one config: the router and the upstream connections. A reload builds a new
// runtime and swaps it in for new requests; the old one closes once its in-flight requests are done.
import { compileTrustedPeers } from './config/addresses';
import type { ProxyConfig } from './config/types';
import type { EdgeSettings } from './http/edge';
import type { JwtPrincipals } from './auth/jwt-principals';
import { createRouter, type Router } from './http/router';
import { PassThrough } from './upstream/passthrough';
import { UpstreamPools } from './upstream/protected';

export class Runtime {
  readonly router: Router;
  readonly edge: EdgeSettings;
  readonly upstreams: UpstreamPools;
  readonly passThrough: PassThrough;
  /** Routes whose request logs show a hash of the key (logKey: hash). */
  readonly hashesKeys: ReadonlySet<string>;
  /** Verifies bearer tokens for routes scoped by a claim (auth.jwt); undefined without auth.jwt. */
  readonly principals: JwtPrincipals | undefined;
  private active = 0;
  private retired = false;
  private closing: Promise<void> | undefined;

  /** `onKeysError`: a background fetch of auth.jwt's key set failed (the keys held stay in use). */
  constructor(
    readonly config: ProxyConfig,
    onKeysError?: (error: unknown) => void,
  ) {
    this.router = createRouter(config.routes);
    this.edge = {
      routesUseHost: config.routes.some((route) => route.match.host !== null),
      trustsPeer: compileTrustedPeers(config.trustedProxies),
      maxRequestHeaders: config.listen.maxRequestHeaders,
    };
    this.upstreams = new UpstreamPools(config.upstreams.values());
    this.passThrough = new PassThrough(config.upstreams.values(), this.upstreams);
    this.hashesKeys = new Set(
      config.routes.filter((r) => r.idempotency?.logKey === 'hash').map((r) => r.name),
    );
    const jwt = config.auth.jwt;
    this.principals = jwt === null ? undefined : new (loadJwtPrincipals())(jwt, onKeysError);
    this.principals?.start();
  }

  enter(): void {
    this.active++;
  }

  leave(): void {
    this.active--;
    if (this.retired && this.active === 0) void this.close();
  }

  /** No new requests will come; close as soon as the last in-flight one leaves. */
  retire(): void {
    this.retired = true;
    if (this.active === 0) void this.close();
  }

  close(): Promise<void> {
    this.closing ??= (async () => {
      this.principals?.close();
      this.passThrough.close();
      await this.upstreams.close();
    })();
    return this.closing;
  }
}

/**
 * Settings a running process cannot change: they need a restart. A listener's certificate, key and
 * CA are swapped in place (listener.ts), but turning TLS on or off needs another kind of server, and
 * clientAuth is fixed when a server is made. The store's pool and LISTEN connection are opened
 * once, so store.tls (like the rest of store) needs a restart.
 */
export function restartOnlyChanges(current: ProxyConfig, next: ProxyConfig): string[] {
  const changes: string[] = [];
  const same = (a: unknown, b: unknown): boolean => JSON.stringify(a) === JSON.stringify(b);
  for (const section of ['listen', 'admin'] as const) {
    const [was, now] = [current[section], next[section]];
    if (was.host !== now.host || was.port !== now.port) changes.push(`${section}.host/port`);
    if ((was.tls === undefined) !== (now.tls === undefined))
      changes.push(`${section}.tls (on or off)`);
    else if (was.tls && now.tls && was.tls.clientAuth !== now.tls.clientAuth)
      changes.push(`${section}.tls.clientAuth`);
  }
  if (current.workers !== next.workers) changes.push('workers');
  if (current.heapTargetBytes !== next.heapTargetBytes) changes.push('heapTarget');
  // Each field by name (`store.poolSize`), so the operator knows what to put back.
  const fields = new Set([...Object.keys(current.store), ...Object.keys(next.store)]);
  for (const field of fields) {
    const key = field as keyof ProxyConfig['store'];
    if (!same(current.store[key], next.store[key])) changes.push(`store.${field}`);
  }
  return changes;
}

/** jose is loaded only when a route takes tokens: a proxy without one keeps none of it resident. */
function loadJwtPrincipals(): typeof JwtPrincipals {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return (require('./auth/jwt-principals') as typeof import('./auth/jwt-principals')).JwtPrincipals;
}
