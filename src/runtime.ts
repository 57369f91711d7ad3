// Everything compiled from one config: the router and the upstream connections. A reload builds a new
// runtime and swaps it in for new requests; the old one closes once its in-flight requests are done.
import { compileTrustedPeers } from './config/addresses';
import type { ProxyConfig } from './config/types';
import type { EdgeSettings } from './http/edge';
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
  private active = 0;
  private retired = false;
  private closing: Promise<void> | undefined;

  constructor(readonly config: ProxyConfig) {
    this.router = createRouter(config.routes);
    this.edge = {
      routesUseHost: config.routes.some((route) => route.match.host !== null),
      trustsPeer: compileTrustedPeers(config.trustedProxies),
    };
    this.upstreams = new UpstreamPools(config.upstreams.values());
    this.passThrough = new PassThrough(config.upstreams.values(), this.upstreams);
    this.hashesKeys = new Set(
      config.routes.filter((r) => r.idempotency?.logKey === 'hash').map((r) => r.name),
    );
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
      this.passThrough.close();
      await this.upstreams.close();
    })();
    return this.closing;
  }
}

/** Settings a running process cannot change: they need a restart. */
export function restartOnlyChanges(current: ProxyConfig, next: ProxyConfig): string[] {
  const changes: string[] = [];
  const same = (a: unknown, b: unknown): boolean => JSON.stringify(a) === JSON.stringify(b);
  if (!same(current.listen, next.listen)) changes.push('listen');
  if (current.admin.host !== next.admin.host || current.admin.port !== next.admin.port)
    changes.push('admin.host/port');
  if (!same(current.store, next.store)) changes.push('store');
  return changes;
}
