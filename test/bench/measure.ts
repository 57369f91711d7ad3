// One scenario: prepare its key, warm up, then the measured load run between two readings of every
// counter — CPU per process (/proc), cores, memory, statements — and what they mean per request.
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { Child } from './children';
import type { Pinning } from './environment';
import type { LoadSpec } from './load';
import type { BenchOptions } from './options';
import { type MemoryParts, readMemoryParts } from './memory-parts';
import { PerfRecording, summarisePerf } from './perf-profile';
import {
  CLOCK_TICKS_PER_S,
  type CoreTimes,
  coreBusyPercent,
  processCpuMicros,
  processCpuSplitMicros,
  readCoreTimes,
  readMemory,
  treeCpuMicros,
} from './proc-stats';
import { summariseProfile } from './profile-summary';
import type { RunResult, ScenarioResult } from './report';
import {
  BODY,
  CONFIG_VARIANTS,
  type Endpoints,
  requestHeaders,
  type Scenario,
  SCENARIOS,
  UNIQUE_KEY,
} from './scenarios';
import { buildTag, debug, type LoadGenerator, sleep, stack, startProxy } from './stack';
import type { StoreProbe } from './store-probe';

/** Lets in-flight requests cut off at the end of a load run finish before counters are read. */
const SETTLE_MS = 300;

/**
 * One scenario with what it needs around it: its own fresh proxy when profiling (--cpu-prof) or when
 * it runs on a config variant (its own config and port). A variant the build does not have: the
 * synchronous_commit scenario sets it server-wide instead (ALTER SYSTEM, reset after); any other is
 * skipped.
 */
export async function runScenario(
  scenario: Scenario,
  runIndex: number,
  options: BenchOptions,
  pinning: Pinning,
  profileDir: string | undefined,
): Promise<ScenarioResult> {
  const probe = stack.probe as StoreProbe;
  const endpoints = stack.endpoints as Endpoints;
  const skipped = (why: string): ScenarioResult => ({
    name: scenario.name,
    label: scenario.label,
    expectedStatus: scenario.expectedStatus,
    skipped: why,
  });
  if (scenario.citus && !stack.citus) {
    return skipped('no Citus store given (--citus-url or CITUS_URL)');
  }
  const variant = scenario.citus
    ? stack.citus?.config
    : scenario.configVariant
      ? stack.variants[scenario.configVariant]
      : undefined;
  if (scenario.configVariant && !variant && !scenario.synchronousCommit) {
    return skipped(`this build rejects store.${CONFIG_VARIANTS[scenario.configVariant]}`);
  }
  let alteredSystem = false;
  if (scenario.synchronousCommit && !variant) {
    const error = await probe.setSynchronousCommit(scenario.synchronousCommit);
    if (error) return skipped(`cannot set synchronous_commit (${error})`);
    alteredSystem = true;
  }
  const profile =
    profileDir && scenario.target === 'proxy'
      ? { dir: profileDir, name: `${buildTag()}run${runIndex}-${scenario.name}.cpuprofile` }
      : undefined;
  const config = variant ?? stack.proxyConfig;
  const ownProxy = scenario.target === 'proxy' && (profile !== undefined || variant !== undefined);
  const saved = { proxy: stack.proxy, endpoints };
  let measured: { result: ScenarioResult; window: { fromUs: number; toUs: number } };
  try {
    if (ownProxy && config) {
      stack.proxy = await startProxy(options, pinning, config, profile);
      stack.endpoints = { ...endpoints, proxy: config.url };
    }
    const adminUrl =
      scenario.target === 'proxy' ? (config ?? stack.proxyConfig)?.adminUrl : undefined;
    measured = await measure(scenario, runIndex, options, pinning, ownProxy, adminUrl);
  } finally {
    if (alteredSystem) await probe.setSynchronousCommit(null);
    // A profile is written when its proxy exits.
    if (ownProxy && stack.proxy && stack.proxy !== saved.proxy) await stack.proxy.stop(15_000);
    stack.proxy = saved.proxy;
    stack.endpoints = saved.endpoints;
  }
  const synchronousCommit = scenario.synchronousCommit
    ? `${scenario.synchronousCommit} (${variant ? 'store.synchronousCommit: false' : 'ALTER SYSTEM, server-wide'})`
    : undefined;
  return withProfile({ ...measured.result, synchronousCommit }, profile, measured.window);
}

/** Prepare, warm up, then the measured load run between two readings of every counter. */
async function measure(
  scenario: Scenario,
  runIndex: number,
  options: BenchOptions,
  pinning: Pinning,
  freshProxy: boolean,
  /** Our proxy's admin listener, when it is the process under test: its memory's parts. */
  adminUrl: string | undefined,
): Promise<{ result: ScenarioResult; window: { fromUs: number; toUs: number } }> {
  // On Citus the statements are counted on its coordinator, and its nodes' CPU is not measured.
  const probe = (scenario.citus ? stack.citus?.probe : stack.probe) as StoreProbe;
  const endpoints = stack.endpoints as Endpoints;
  const loadGenerator = stack.load as LoadGenerator;
  if (scenario.target === 'store') throw new Error(`${scenario.name} is not an HTTP scenario`);
  const target = scenario.target;
  const key =
    scenario.key === 'unique'
      ? UNIQUE_KEY
      : `bench-${scenario.name}-${runIndex}-${randomBytes(4).toString('hex')}`;
  const storeNote = scenario.prepareStore
    ? await scenario.prepareStore({ rows: options.rows })
    : undefined;
  const undo = scenario.prepare ? await scenario.prepare(endpoints, key) : undefined;
  try {
    const spec: LoadSpec = {
      url: `${endpoints[target]}${scenario.path}`,
      method: 'POST',
      headers: requestHeaders(key),
      body: BODY,
      connections: options.connections,
      durationS: options.durationS,
      uniqueIds: scenario.key === 'unique',
    };
    debug('prepared; warming up');
    // A proxy started for this scenario is a cold process (no JIT yet): twice the warm-up.
    const warmupS = options.warmupS * (freshProxy ? 2 : 1);
    if (warmupS > 0) await loadGenerator.run({ ...spec, durationS: warmupS });
    debug('warmed up');
    await sleep(SETTLE_MS);

    const underTest = {
      upstream: undefined,
      proxy: stack.proxy,
      bare: stack.bare,
      bareUndici: stack.bareUndici,
      fastify: stack.fastify,
      replayFloor: stack.replayFloor,
    }[target];
    const pids = {
      proxy: underTest?.pid,
      upstream: stack.upstream?.pid,
      postmaster: scenario.citus ? undefined : stack.store?.postmasterPid,
      load: loadGenerator.child.pid,
    };
    const statementsBefore = scenario.countsRoundTrips ? await probe.read() : undefined;
    const recording =
      stack.perfDir && underTest
        ? await PerfRecording.start(
            underTest.pid,
            path.join(stack.perfDir, `${buildTag()}run${runIndex}-${scenario.name}.perf.data`),
            pinning.load,
          )
        : undefined;
    stack.sampler?.takeWindow();
    const before = snapshot(pids);
    debug('measuring');
    const endDuring = scenario.duringMeasurement?.();
    const load = await loadGenerator.run(spec);
    debug(`measured: ${JSON.stringify(load.statusCodes)}`);
    const after = snapshot(pids);
    // Read while the window's garbage is still there: what the load held, not what is left.
    const memoryParts: MemoryParts | undefined = adminUrl
      ? await readMemoryParts(adminUrl)
      : undefined;
    await recording?.stop();
    const duringNote = endDuring ? await endDuring() : undefined;
    const peaks = stack.sampler?.takeWindow();
    await sleep(SETTLE_MS);
    const statementsAfter = scenario.countsRoundTrips ? await probe.read() : undefined;

    const perRequest = (which: keyof Snapshot['cpu']): number | undefined => {
      const from = before.cpu[which];
      const to = after.cpu[which];
      return from === undefined || to === undefined || load.completed === 0
        ? undefined
        : (to - from) / load.completed;
    };
    let storeRoundTrips: ScenarioResult['storeRoundTrips'];
    if (statementsBefore && statementsAfter) {
      // Divided by requests sent: the ones cut off when the run stopped still reached the store.
      const byKind: Record<string, number> = {};
      for (const [kind, count] of Object.entries(statementsAfter.byKind)) {
        const delta = count - (statementsBefore.byKind[kind] ?? 0);
        if (delta !== 0) byKind[kind] = delta;
      }
      const total = statementsAfter.total - statementsBefore.total;
      storeRoundTrips = { total, perRequest: total / Math.max(1, load.sent), byKind };
    }
    const busy = (core: number | undefined): number | undefined =>
      core === undefined ? undefined : coreBusyPercent(before.cores, after.cores, core);
    const expected = load.statusCodes[String(scenario.expectedStatus)] ?? 0;
    const result: ScenarioResult = {
      name: scenario.name,
      label: scenario.label,
      expectedStatus: scenario.expectedStatus,
      load,
      requestsPerS: load.completed / load.durationS,
      cpuMicrosPerRequest: {
        proxy: perRequest('proxy'),
        proxyUser:
          before.proxySplit && after.proxySplit && load.completed > 0
            ? (after.proxySplit.user - before.proxySplit.user) / load.completed
            : undefined,
        proxySystem:
          before.proxySplit && after.proxySplit && load.completed > 0
            ? (after.proxySplit.system - before.proxySplit.system) / load.completed
            : undefined,
        upstream: perRequest('upstream'),
        postgres: perRequest('postgres'),
        loadGenerator: perRequest('load'),
      },
      coreBusyPercent: {
        load: busy(pinning.load),
        loadGenerator:
          before.cpu.load === undefined || after.cpu.load === undefined
            ? undefined
            : (100 * (after.cpu.load - before.cpu.load)) / Math.max(1, after.atUs - before.atUs),
        underTest: busy(pinning.underTest),
        foreignOnUnderTest:
          pinning.underTest === undefined
            ? undefined
            : foreignPercent(before, after, pinning.underTest),
      },
      peakRssBytes: underTest ? peaks?.get(underTest.pid) : undefined,
      hwmBytes: underTest ? readMemory(underTest.pid)?.hwmBytes : undefined,
      memoryParts,
      storeRoundTrips,
      unexpected: load.completed - expected + load.errors + load.timeouts,
      perfProfile: recording ? summarisePerf(recording.file) : undefined,
      note:
        [
          storeNote,
          duringNote,
          scenario.citus
            ? 'statements counted on the Citus coordinator; the Citus nodes are external processes: their CPU is not measured'
            : undefined,
        ]
          .filter(Boolean)
          .join('; ') || undefined,
    };
    return { result, window: { fromUs: before.atUs, toUs: after.atUs } };
  } finally {
    debug('undoing');
    await undo?.();
    debug('undone');
  }
}

/** Adds the profile summary to a profiled scenario's result (after its proxy has exited). */
function withProfile(
  result: ScenarioResult,
  profile: { dir: string; name: string } | undefined,
  window: { fromUs: number; toUs: number } | undefined,
): ScenarioResult {
  if (!profile) return result;
  const file = path.join(profile.dir, profile.name);
  if (!fs.existsSync(file)) return result;
  return { ...result, profile: summariseProfile(file, window) };
}

export interface Snapshot {
  readonly atUs: number;
  readonly cpu: Record<'proxy' | 'upstream' | 'postgres' | 'load', number | undefined>;
  /** CPU of every process of ours pinned to the core under test, whatever the scenario. */
  readonly oursOnUnderTestCore: number;
  readonly proxySplit: { user: number; system: number } | undefined;
  readonly cores: CoreTimes;
}

export interface SnapshotPids {
  readonly proxy: number | undefined;
  readonly upstream: number | undefined;
  readonly postmaster: number | undefined;
  readonly load: number | undefined;
}

export function snapshot(pids: SnapshotPids): Snapshot {
  const cpu = (pid: number | undefined): number | undefined =>
    pid === undefined ? undefined : processCpuMicros(pid);
  const postgres = pids.postmaster === undefined ? undefined : treeCpuMicros(pids.postmaster);
  const core = stack.proxy?.core ?? stack.upstream?.core;
  const onCore = [
    stack.upstream,
    stack.bare,
    stack.bareUndici,
    stack.fastify,
    stack.replayFloor,
    stack.proxy,
    stack.other?.proxy,
    stack.store?.child,
  ].filter((child): child is Child => child !== undefined && child.core === core);
  const ours = onCore
    .map((child) => processCpuMicros(child.pid) ?? 0)
    .reduce(
      (sum, micros) => sum + micros,
      stack.store?.child && stack.store.child.core === core ? (postgres ?? 0) : 0,
    );
  return {
    atUs: Number(process.hrtime.bigint() / 1000n),
    cpu: {
      // With `workers` > 1 the proxy is a primary and its workers: the tree (one process otherwise).
      proxy: pids.proxy === undefined ? undefined : treeCpuMicros(pids.proxy),
      upstream: cpu(pids.upstream),
      postgres,
      load: cpu(pids.load),
    },
    oursOnUnderTestCore: ours,
    proxySplit: pids.proxy === undefined ? undefined : processCpuSplitMicros(pids.proxy),
    cores: readCoreTimes(),
  };
}

/** Share of the core under test that went to processes that are not ours (other work on the box). */
export function foreignPercent(before: Snapshot, after: Snapshot, core: number): number {
  const windowUs = after.atUs - before.atUs;
  const busyUs =
    (((after.cores.busy.get(core) ?? 0) - (before.cores.busy.get(core) ?? 0)) * 1_000_000) /
    CLOCK_TICKS_PER_S;
  const oursUs = after.oursOnUnderTestCore - before.oursOnUnderTestCore;
  return windowUs > 0 ? Math.max(0, (100 * (busyUs - oursUs)) / windowUs) : 0;
}

/**
 * Memory of the proxy that serves the run: the long-lived main proxy (scenarios on a config variant
 * run on a fresh process of their own and are left out). Under --cpu-prof every scenario has its
 * own proxy, so this is the largest of them.
 */
export function proxyMemory(scenarios: readonly ScenarioResult[]): RunResult['proxyMemory'] {
  const ours = scenarios.filter(
    (s) => SCENARIOS[s.name].target === 'proxy' && !SCENARIOS[s.name].configVariant && !s.skipped,
  );
  const max = (values: (number | undefined)[]): number | undefined => {
    const known = values.filter((value): value is number => value !== undefined);
    return known.length > 0 ? Math.max(...known) : undefined;
  };
  const now = stack.proxy ? readMemory(stack.proxy.pid) : undefined;
  return {
    hwmBytes: max([now?.hwmBytes, ...ours.map((s) => s.hwmBytes)]),
    peakRssBytes: max(ours.map((s) => s.peakRssBytes)),
    endRssBytes: now?.rssBytes,
  };
}
