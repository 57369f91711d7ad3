// Where things run and what else runs there: core pinning (taskset), the machine's own load before
// the bench starts, and the header + JSON description of the environment.
import { execFileSync } from 'node:child_process';
import os from 'node:os';
import { canPin, type Child } from './children';
import type { BenchOptions } from './options';
import { CLOCK_TICKS_PER_S, coreBusyPercent, readAffinity, readCoreTimes } from './proc-stats';
import { BODY } from './scenarios';
import { ROOT, servingNodeFlags, sleep, type Stack, type Store } from './stack';
import type { ServerSettings } from './store-probe';

export interface Pinning {
  /** The orchestrator and the load generator. */
  readonly load: number | undefined;
  /** Our proxy (and, in the normal layout, everything else under test). */
  readonly underTest: number | undefined;
  /** Upstream, the bare forwarders, PostgreSQL: the under-test core, or the load core when profiling. */
  readonly helpers: number | undefined;
  readonly warning: string | undefined;
}

/**
 * Normal layout: load generator on the first allowed core, everything under test on the second.
 * Profiling layout (--cpu-prof): our proxy alone on the second core, so the V8 profiler — which
 * samples wall-clock time — never sees it waiting while PostgreSQL or the upstream use its core.
 */
export function decidePinning(isolateProxy: boolean): Pinning {
  const allowed = parseCpuList(readAffinity(process.pid) ?? '');
  const none = (warning: string): Pinning => ({
    load: undefined,
    underTest: undefined,
    helpers: undefined,
    warning,
  });
  if (!canPin) return none('taskset not found: nothing is pinned');
  if (allowed.length < 2) {
    return none(
      `only ${allowed.length} core available: the load generator shares the CPU with everything under test; CPU per request still means something, req/s much less`,
    );
  }
  const [load, underTest] = allowed as [number, number];
  return { load, underTest, helpers: isolateProxy ? load : underTest, warning: undefined };
}

function parseCpuList(list: string): number[] {
  const cpus: number[] = [];
  for (const part of list.split(',')) {
    const [from, to] = part.split('-').map(Number);
    if (from === undefined || !Number.isInteger(from)) continue;
    for (let cpu = from; cpu <= (to ?? from); cpu++) cpus.push(cpu);
  }
  return cpus;
}

export function describeEnvironment(
  stack: Stack,
  pinning: Pinning,
  settings: ServerSettings,
  options: BenchOptions,
  idleBusy: { core: number; percent: number }[],
): { lines: string[]; data: Record<string, unknown> } {
  const affinity = (child: Child | undefined): string =>
    child ? (readAffinity(child.pid) ?? '?') : '—';
  const verified = {
    loadGenerator: affinity(stack.load?.child),
    upstream: affinity(stack.upstream),
    bareHttpProxy: affinity(stack.bare),
    bareUndici: affinity(stack.bareUndici),
    fastify: affinity(stack.fastify),
    replayFloor: affinity(stack.replayFloor),
    proxy: stack.proxy ? affinity(stack.proxy) : 'started per scenario',
    postgres: stack.store?.postmasterPid
      ? (readAffinity(stack.store.postmasterPid) ?? '?')
      : 'external (not pinned)',
  };
  const git = gitDescription();
  const cpus = os.cpus();
  const store = stack.store as Store;
  const data = {
    node: process.version,
    cpuModel: cpus[0]?.model ?? '?',
    cpus: cpus.length,
    clockTicksPerS: CLOCK_TICKS_PER_S,
    git,
    busyBeforeStartPercent: Object.fromEntries(
      idleBusy.map((busy) => [`cpu${busy.core}`, Math.round(busy.percent)]),
    ),
    pinning: {
      loadCore: pinning.load,
      proxyCore: pinning.underTest,
      helpersCore: pinning.helpers,
      warning: pinning.warning,
      verified,
    },
    store: {
      mode: store.embedded ? 'embedded' : 'DATABASE_URL',
      postgresCpuMeasured: store.postmasterPid !== undefined,
      table: stack.table,
      roundTripCounting: stack.probe?.method,
      settings,
    },
    proxy: {
      logLevel: options.logLevel,
      poolSize: options.poolSize,
      nodeArgs: [...servingNodeFlags(stack.build), ...options.proxyNodeArgs],
      env: options.proxyEnv,
      tracing: options.tracing,
      stdout: '/dev/null',
    },
    request: {
      method: 'POST',
      bodyBytes: Buffer.byteLength(BODY),
      contentType: 'application/json',
    },
  };
  const lines = [
    `idempotency-proxy bench — ${new Date().toISOString()}, node ${process.version}, ${cpus.length} × ${data.cpuModel}, git ${git}`,
    pinning.load === undefined
      ? `pinning: none (${pinning.warning ?? ''})`
      : (pinning.helpers === pinning.underTest
          ? `pinning: load generator → cpu${pinning.load}; upstream, proxy, bare http-proxy, bare undici, @fastify/http-proxy, replay floor${store.embedded ? ', PostgreSQL' : ''} → cpu${pinning.underTest}`
          : `pinning (profiling layout): proxy alone → cpu${pinning.underTest}; load generator, upstream, bare http-proxy, bare undici, @fastify/http-proxy, replay floor, PostgreSQL → cpu${pinning.load}`) +
        ` (affinity: load ${verified.loadGenerator}, upstream ${verified.upstream}, bare ${verified.bareHttpProxy}, bare undici ${verified.bareUndici}, fastify ${verified.fastify}, replay floor ${verified.replayFloor}, proxy ${verified.proxy}, postgres ${verified.postgres})`,
    `store: ${store.embedded ? 'embedded' : 'external (DATABASE_URL: not pinned, CPU not measured)'} PostgreSQL ${settings.serverVersion}` +
      ` (fsync ${settings.fsync}, synchronous_commit ${settings.synchronousCommit}, wal_sync_method ${settings.walSyncMethod}, shared_buffers ${settings.sharedBuffers});` +
      ` proxy pool ${options.poolSize}; round trips counted with ${stack.probe?.method}` +
      (stack.probe?.method === 'pg_stat_database' ? ' (approximate: transactions)' : ''),
    `other work before the start: ${idleBusy.map((busy) => `cpu${busy.core} ${busy.percent.toFixed(0)}% busy`).join(', ')}`,
    `load: autocannon, ${options.connections} connections, POST ${Buffer.byteLength(BODY)}-byte JSON body with an Idempotency-Key;` +
      ` proxy LOG_LEVEL=${options.logLevel} (stdout → /dev/null)${options.tracing ? ', tracing on (OTLP to a dropping sink)' : ''}` +
      `, node ${data.proxy.nodeArgs.join(' ') || '(no flags)'} dist/main.js serve (npm start's flags first)`,
  ];
  return { lines, data };
}

/** How busy the cores are before the bench starts anything: other work on the machine. */
export async function busyBeforeStart(
  pinning: Pinning,
): Promise<{ core: number; percent: number }[]> {
  const cores = [...new Set([pinning.load, pinning.underTest])].filter(
    (core): core is number => core !== undefined,
  );
  const before = readCoreTimes();
  await sleep(1_000);
  const after = readCoreTimes();
  const measured = cores.length > 0 ? cores : [...after.total.keys()];
  return measured.map((core) => ({ core, percent: coreBusyPercent(before, after, core) }));
}

function gitDescription(): string {
  try {
    const head = execFileSync('git', ['rev-parse', '--short', 'HEAD'], {
      cwd: ROOT,
      encoding: 'utf8',
    }).trim();
    const dirty = execFileSync('git', ['status', '--porcelain', '--', 'src'], {
      cwd: ROOT,
      encoding: 'utf8',
    }).trim();
    return dirty ? `${head} + uncommitted src changes` : head;
  } catch {
    return 'unknown';
  }
}
