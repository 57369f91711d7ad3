// The background sweep of unknown outcomes (docs/reconcile.md): one chained timer per instance, at
// the shortest reconcile.every of the config in force, each route swept when its own period is up.
// Any number of instances may run it: a route's sweep takes its due records under a try-lock (the
// others skip the round), and each record's probe is taken with a token, so one probe per record
// per period whoever sweeps. The first round waits a random part of the period, so instances
// started together do not sweep in step.
import type { Logger } from 'pino';
import type { ProxyConfig, RouteConfig, UpstreamConfig } from '../config/types';
import { UpstreamPools } from '../upstream/protected';
import type { Reconciler, SweepResult } from './reconciler';

export interface BackgroundSweeper {
  stop(): Promise<void>;
}

/** When no route sweeps, how often the config in force is looked at again (a reload may add one). */
const IDLE_CHECK_MS = 5_000;

export function startSweeper(
  reconciler: Reconciler,
  config: () => ProxyConfig,
  logger: Logger,
): BackgroundSweeper {
  let pools: { config: ProxyConfig; upstreams: UpstreamPools } | undefined;
  const lastSwept = new Map<string, number>();
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<void> | undefined;
  let stopped = false;

  const upstreamsFor = (current: ProxyConfig): UpstreamPools => {
    if (pools?.config !== current) {
      void pools?.upstreams.close();
      pools = { config: current, upstreams: new UpstreamPools(upstreamsOf(current)) };
    }
    return pools.upstreams;
  };
  const round = async (): Promise<void> => {
    const current = config();
    if (!current.routes.some((route) => (route.idempotency?.reconcile?.everyMs ?? 0) > 0)) return;
    const now = Date.now();
    const due = (route: RouteConfig): boolean => {
      const every = route.idempotency?.reconcile?.everyMs ?? 0;
      if (every === 0 || now - (lastSwept.get(route.name) ?? 0) < every) return false;
      lastSwept.set(route.name, now);
      return true;
    };
    try {
      const result = await reconciler.sweep(current, upstreamsFor(current), due);
      if (result.probed > 0) logger.info({ ...result }, 'reconcile: swept unknown outcomes');
    } catch (error) {
      logger.warn({ err: error }, 'reconcile: the sweep failed; it runs again next period');
    }
  };
  const schedule = (delayMs: number): void => {
    if (stopped) return;
    timer = setTimeout(() => {
      running = round().finally(() => {
        running = undefined;
        schedule(periodOf(config()));
      });
    }, delayMs);
    timer.unref();
  };
  schedule(Math.random() * periodOf(config()));
  return {
    async stop() {
      stopped = true;
      clearTimeout(timer);
      await running;
      await pools?.upstreams.close();
    },
  };
}

/** The shortest reconcile.every of the config's routes, or IDLE_CHECK_MS when none sweeps. */
function periodOf(config: ProxyConfig): number {
  const periods = config.routes.flatMap((route) => {
    const every = route.idempotency?.reconcile?.everyMs ?? 0;
    return every > 0 ? [every] : [];
  });
  return periods.length ? Math.min(...periods) : IDLE_CHECK_MS;
}

export function upstreamsOf(config: ProxyConfig): UpstreamConfig[] {
  return [...config.upstreams.values()];
}

/** One sweep now of every route with reconcile (or only `route`), whatever its every: the CLI's. */
export async function sweepOnce(
  reconciler: Reconciler,
  config: ProxyConfig,
  route?: string,
): Promise<SweepResult> {
  const upstreams = new UpstreamPools(upstreamsOf(config));
  try {
    return await reconciler.sweep(
      config,
      upstreams,
      (r) => route === undefined || r.name === route,
    );
  } finally {
    await upstreams.close();
  }
}
