// `npm run bench`: measures the built proxy against bare http-proxy and undici forwarding scripts and
// the upstream itself.
//
//   core 0: this orchestrator, the load generator (autocannon, its own process)
//   core 1: upstream, bare http-proxy, bare undici, our proxy (dist/main.js serve), PostgreSQL (embedded, or
//           DATABASE_URL — then neither pinned nor measured)
//
// Per scenario: warm-up, then a measured run; CPU per request is each process's utime+stime delta
// (/proc) over the measured run divided by the responses received; store round trips are statements
// counted by the server (store-probe.ts). Prints one table per run, the target checks, and
// writes JSON. A benchmark, not a test: it asserts nothing and exits 0 whatever the numbers.
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  type Child,
  killAllChildrenNow,
  onUnexpectedExit,
  pinSelf,
  spawnPinned,
  waitForMessage,
} from './children';
import { busyBeforeStart, decidePinning, describeEnvironment } from './environment';
import { proxyMemory, runScenario } from './measure';
import { type BenchOptions, parseOptions, USAGE, UsageError } from './options';
import { formatPerf, PERF } from './perf-profile';
import { readMemory, RssSampler } from './proc-stats';
import { formatProfile } from './profile-summary';
import {
  checkTargets,
  formatDetails,
  formatSynchronousCommit,
  formatTable,
  formatTargets,
  formatTargetSummary,
  type RunResult,
  type ScenarioName,
  type ScenarioResult,
  summariseTargets,
  type TargetCheck,
} from './report';
import { runStoreFloor } from './store-floor';
import { type BigBodyResult, formatBigBody, measureBigBody } from './big-body';
import { formatStreams, measureStreams, type StreamsResult } from './measure-streams';
import { prepareBaseline } from './baseline';
import { type BuildComparison, compareRuns, formatComparison, sideBySide } from './compare';
import { CONFIG_VARIANTS, type ConfigVariant, SCENARIOS } from './scenarios';
import {
  compareWorkers,
  formatWorkers,
  type WorkersRun,
  workersScenarios,
} from './workers-compare';
import {
  BENCH_DIR,
  type Build,
  cleanup,
  cleanupStarted,
  DIST_DIR,
  LoadGenerator,
  ROOT,
  say,
  sleep,
  stack,
  stamp,
  startProxy,
  startStore,
  withOtherBuild,
  writeProxyConfig,
} from './stack';
import { StoreProbe } from './store-probe';
import { formatRounds, type RoundsResult, runRounds } from './rounds';

let interrupted = false;

async function main(): Promise<number> {
  let options: BenchOptions | 'help';
  try {
    options = parseOptions(process.argv.slice(2));
  } catch (error) {
    process.stderr.write(`bench: ${(error as Error).message}\n\n${USAGE}`);
    return 2;
  }
  if (options === 'help') {
    process.stdout.write(USAGE);
    return 0;
  }
  if (options.perf && !PERF) {
    process.stderr.write('bench: --perf needs Linux perf (/usr/bin/perf)\n');
    return 2;
  }
  if (!fs.existsSync(path.join(DIST_DIR, 'main.js'))) {
    process.stderr.write('bench: dist/main.js is missing: run `npm run build` first\n');
    return 2;
  }
  // Built (or found in the cache) before anything is measured or pinned: tsc is not under test.
  let baseline: Build | undefined;
  try {
    baseline = options.baseline ? await prepareBaseline(options.baseline) : undefined;
  } catch (error) {
    if (interrupted) throw error;
    process.stderr.write(`bench: ${(error as Error).message}\n`);
    return 2;
  }
  const startedAt = new Date();
  const pinning = decidePinning(options.cpuProf);
  if (pinning.warning) process.stderr.write(`bench: WARNING: ${pinning.warning}\n`);
  if (pinning.load !== undefined) pinSelf(pinning.load);
  const idleBusy = await busyBeforeStart(pinning);
  if (idleBusy.some((busy) => busy.percent > 15)) {
    process.stderr.write(
      `bench: WARNING: the machine is busy before the bench starts (${idleBusy.map((busy) => `cpu${busy.core} ${busy.percent.toFixed(0)}%`).join(', ')}): expect noisy numbers\n`,
    );
  }

  stack.tmpDir = fs.mkdtempSync(path.join(os.tmpdir(), 'idempotency-proxy-bench-'));
  // As root the embedded PostgreSQL runs as the postgres user, which must reach its data dir in here.
  fs.chmodSync(stack.tmpDir, 0o711);
  stack.sampler = new RssSampler(100);
  const node = process.execPath;
  const bench = (file: string): string => path.join(BENCH_DIR, file);

  say(
    'starting the load generator, the upstream, the bare forwarders (http-proxy, undici), @fastify/http-proxy and the replay floor…',
  );
  const loadChild = spawnPinned('load generator', node, [bench('load.js')], {
    core: pinning.load,
    ipc: true,
  });
  stack.load = new LoadGenerator(loadChild);
  stack.upstream = spawnPinned('upstream', node, [bench('upstream-server.js')], {
    core: pinning.helpers,
    ipc: true,
  });
  await waitForMessage(loadChild, 'ready', 30_000);
  const upstreamPort = (
    await waitForMessage<{ type: string; port: number }>(stack.upstream, 'ready', 30_000)
  ).port;
  const upstreamUrl = `http://127.0.0.1:${upstreamPort}`;
  // Under --perf the baselines are profiled too, so the forwarders compare frame for frame.
  const startBare = async (label: string, script: string): Promise<[Child, number]> => {
    const child = spawnPinned(
      label,
      node,
      [...(options.perf ? ['--perf-basic-prof'] : []), bench(script)],
      { core: pinning.helpers, ipc: true, env: { ...process.env, BENCH_TARGET: upstreamUrl } },
    );
    if (options.perf) stack.profiledPids.push(child.pid);
    stack.sampler?.watch(child.pid);
    const ready = await waitForMessage<{ type: string; port: number }>(child, 'ready', 30_000);
    return [child, ready.port];
  };
  let barePort: number;
  let bareUndiciPort: number;
  [stack.bare, barePort] = await startBare('bare http-proxy', 'bare-http-proxy.js');
  [stack.bareUndici, bareUndiciPort] = await startBare('bare undici', 'bare-undici.js');
  const [fastify, fastifyPort] = await startBare('@fastify/http-proxy', 'fastify-proxy.js');
  const [replayFloor, replayFloorPort] = await startBare('replay floor', 'replay-floor.js');
  stack.fastify = fastify;
  stack.replayFloor = replayFloor;
  if (options.tracing) {
    // Spans go to a second upstream-server on the helpers' core: it reads and drops each export.
    const sink = spawnPinned('otlp sink', node, [bench('upstream-server.js')], {
      core: pinning.helpers,
      ipc: true,
    });
    const { port } = await waitForMessage<{ type: string; port: number }>(sink, 'ready', 30_000);
    stack.otlpSink = { child: sink, url: `http://127.0.0.1:${port}` };
    say(`tracing on: the proxy exports its spans to ${stack.otlpSink.url} (dropped)`);
  }

  stack.store = await startStore(pinning);
  stack.probe = await StoreProbe.open(stack.store.url);
  const settings = await stack.probe.settings();
  stack.table = `bench_${randomBytes(4).toString('hex')}`;
  const configValues = {
    storeUrl: stack.store.url,
    table: stack.table,
    poolSize: options.poolSize,
    upstreamUrl,
  };
  const writeConfigs = async (prefix: string, values: typeof configValues): Promise<void> => {
    stack.proxyConfig = await writeProxyConfig(stack.tmpDir as string, prefix, values);
    if (!stack.proxyConfig) {
      throw new Error(`the ${stack.build.label} build rejects the bench configuration`);
    }
    for (const [variant, storeOption] of Object.entries(CONFIG_VARIANTS)) {
      stack.variants[variant as ConfigVariant] = await writeProxyConfig(
        stack.tmpDir as string,
        `${prefix}-${variant}`,
        { ...values, storeOption },
      );
    }
  };
  await writeConfigs('bench-proxy', configValues);
  if (baseline) {
    // The baseline's own table (a name of the same length), configs, ports and main proxy.
    stack.other = { build: baseline, variants: {} };
    await withOtherBuild(async () => {
      stack.table = `bench_${randomBytes(4).toString('hex')}`;
      await writeConfigs('bench-proxy-baseline', { ...configValues, table: stack.table });
    });
  }
  if (options.citusUrl) {
    // A proxy of its own on the cluster (its table, which its migrate distributes), started for
    // new-key-citus. Statements are counted on the coordinator: those naming that table (its LISTEN
    // channels too; a shard's name, <table>_<n>, does not match) and pg_notify nudges, which name no
    // table. Other users of the cluster, Citus' own queries and shard queries are left out.
    const table = `bench_${randomBytes(4).toString('hex')}`;
    const ours = new RegExp(`${table}\\b|\\bpg_notify\\(`);
    const probe = await StoreProbe.open(options.citusUrl, (query) => ours.test(query));
    const config = await writeProxyConfig(stack.tmpDir, 'bench-proxy-citus', {
      ...configValues,
      storeUrl: options.citusUrl,
      table,
    });
    if (!config) throw new Error(`the ${stack.build.label} build rejects the Citus configuration`);
    stack.citus = { url: options.citusUrl, table, config, probe };
  }
  stack.endpoints = {
    upstream: upstreamUrl,
    bare: `http://127.0.0.1:${barePort}`,
    bareUndici: `http://127.0.0.1:${bareUndiciPort}`,
    fastify: `http://127.0.0.1:${fastifyPort}`,
    replayFloor: `http://127.0.0.1:${replayFloorPort}`,
    proxy: stack.proxyConfig!.url,
  };
  let idleRssBytes: number | undefined;
  if (!options.cpuProf) {
    if (baseline) {
      await withOtherBuild(async () => {
        stack.proxy = await startProxy(options, pinning, stack.proxyConfig!);
      });
    }
    stack.proxy = await startProxy(options, pinning, stack.proxyConfig!);
    // What a started proxy holds before its first request: a second to settle after it answered.
    await sleep(1_000);
    idleRssBytes = readMemory(stack.proxy.pid)?.rssBytes;
  }

  const outFile = path.resolve(
    options.out ?? path.join(ROOT, 'bench-results', `${stamp(startedAt)}.json`),
  );
  const profileDir = options.cpuProf ? outFile.replace(/\.json$/, '') + '-profiles' : undefined;
  stack.perfDir = options.perf ? outFile.replace(/\.json$/, '') + '-perf' : undefined;
  const environment = describeEnvironment(stack, pinning, settings, options, idleBusy);
  process.stdout.write(`\n${environment.lines.join('\n')}\n`);
  if (baseline) {
    process.stdout.write(
      `baseline: ${baseline.ref} = ${baseline.commit} (${baseline.cached ? 'cached build' : 'built for this run'}, ${baseline.root}; node_modules: this checkout's); every proxy scenario runs on it first, then on the current build` +
        `${baseline.buildWarning ? `\n  (the baseline built with type errors: ${baseline.buildWarning})` : ''}\n`,
    );
  }

  const attempt = async (name: ScenarioName, index: number): Promise<ScenarioResult> => {
    const when =
      index <= options.runs
        ? `run ${index}/${options.runs}`
        : `round ${index - options.runs}/${options.rounds}`;
    say(
      `${when}: ${SCENARIOS[name].label}${stack.other && SCENARIOS[name].target === 'proxy' ? ` [${stack.build.label}]` : ''}…`,
    );
    try {
      return SCENARIOS[name].target === 'store'
        ? await runStoreFloor(options, pinning)
        : await runScenario(SCENARIOS[name], index, options, pinning, profileDir);
    } catch (error) {
      if (interrupted) throw error;
      const message = error instanceof Error ? error.message : String(error);
      say(`${SCENARIOS[name].label} failed: ${message}`);
      const { label, expectedStatus } = SCENARIOS[name];
      return { name, label, expectedStatus, skipped: `failed: ${message.split('\n')[0]}` };
    }
  };
  const runs: RunResult[] = [];
  /** --baseline: the baseline's runs (the scenarios without our proxy are shared, run once). */
  const baselineRuns: RunResult[] = [];
  const comparisons: BuildComparison[] = [];
  /** The target checks of every run, in order (the summary after the last run). */
  const targetsByRun: TargetCheck[][] = [];
  for (let index = 1; index <= options.runs; index++) {
    const scenarios: ScenarioResult[] = [];
    const baselineScenarios: ScenarioResult[] = [];
    for (const name of options.scenarios) {
      if (baseline && SCENARIOS[name].target === 'proxy') {
        // Interleaved, scenario by scenario: drift on the machine reaches both builds alike.
        baselineScenarios.push(await withOtherBuild(() => attempt(name, index)));
        scenarios.push(await attempt(name, index));
      } else {
        const result = await attempt(name, index);
        scenarios.push(result);
        if (baseline) baselineScenarios.push(result);
      }
    }
    runs.push({ index, scenarios, proxyMemory: proxyMemory(scenarios) });
    const run = runs[runs.length - 1] as RunResult;
    let shown = run;
    if (baseline) {
      baselineRuns.push({
        index,
        scenarios: baselineScenarios,
        proxyMemory: await withOtherBuild(() => Promise.resolve(proxyMemory(baselineScenarios))),
      });
      const baselineRun = baselineRuns[baselineRuns.length - 1] as RunResult;
      comparisons.push(compareRuns(baselineRun, run));
      shown = sideBySide(baselineRun, run);
    }
    process.stdout.write(
      `\nRun ${index}/${options.runs} — ${options.connections} connections, ${options.durationS} s per scenario after ${options.warmupS} s warm-up` +
        `${options.cpuProf ? ' (PROFILED: CPU inflated by the profiler)' : ''}\n\n` +
        `${formatTable(shown)}\n\n${formatDetails(shown)}\n`,
    );
    if (baseline) {
      process.stdout.write(
        `\n${formatComparison(comparisons[comparisons.length - 1]!, baseline)}\n`,
      );
    }
    const sync = formatSynchronousCommit(run);
    if (sync) process.stdout.write(`${sync}\n`);
    targetsByRun.push(checkTargets(run, runs, stack.citus !== undefined, idleRssBytes));
    process.stdout.write(
      `\nTargets, run ${index} (informational${baseline ? ', current build' : ''}):\n${formatTargets(targetsByRun[targetsByRun.length - 1]!)}\n`,
    );
  }
  const targetSummary = summariseTargets(targetsByRun);
  process.stdout.write(
    `\nTargets over ${runs.length} run${runs.length === 1 ? '' : 's'} (each run's value, in order):\n${formatTargetSummary(targetSummary)}\n`,
  );
  let rounds: RoundsResult | undefined;
  if (options.rounds > 0) {
    rounds = await runRounds(options.rounds, options.scenarios, (name, round) =>
      attempt(name, options.runs + round),
    );
    process.stdout.write(`\n${formatRounds(rounds)}\n`);
  }

  if (options.perf) {
    process.stdout.write(
      `\nWhere the CPU of the process under test goes (perf, measured window):\n`,
    );
    for (const run of runs) {
      for (const scenario of run.scenarios) {
        if (scenario.perfProfile) {
          process.stdout.write(
            `\n${formatPerf(`${scenario.label} (run ${run.index})`, scenario.perfProfile)}\n`,
          );
        }
      }
    }
  }

  if (profileDir) {
    process.stdout.write(
      `\nV8 CPU profiles of the proxy (self time, measured window; the V8 profiler samples wall-clock\n` +
        `time, so native frames such as writev/writeString also carry time spent preempted):\n`,
    );
    // With --baseline, each profiled scenario twice, baseline first: before and after, side by side.
    runs.forEach((run, i) => {
      const builds: [string, RunResult | undefined][] = [
        [baseline ? ` [${baseline.ref}]` : '', baselineRuns[i]],
        [baseline ? ' [current]' : '', run],
      ];
      for (const scenario of run.scenarios) {
        for (const [tag, build] of builds) {
          const profile = build?.scenarios.find((s) => s.name === scenario.name)?.profile;
          if (profile && (build === run || SCENARIOS[scenario.name].target === 'proxy'))
            process.stdout.write(
              `\n${formatProfile(`${scenario.label}${tag} (run ${run.index})`, profile)}\n`,
            );
        }
      }
    });
  }

  type BigBody = BigBodyResult | { failed: string } | { skipped: string };
  const bigBodies = async (): Promise<BigBody> => {
    const tag = stack.other ? ` [${stack.build.label}]` : '';
    if (!stack.proxy) {
      // --cpu-prof starts the proxy per scenario: none is running now.
      return { skipped: 'no proxy running between scenarios (--cpu-prof)' };
    }
    try {
      say(`big bodies${tag}: 20 concurrent repeats of a 1 MB body beside a pass-through probe…`);
      const result = await measureBigBody(
        stack.endpoints!,
        stack.proxyConfig!.adminUrl,
        pinning.load,
        stack.sampler && { pid: stack.proxy.pid, sampler: stack.sampler },
      );
      process.stdout.write(`\n${tag ? `${stack.build.label}: ` : ''}${formatBigBody(result)}\n`);
      return result;
    } catch (error) {
      const failed = { failed: error instanceof Error ? error.message : String(error) };
      process.stdout.write(
        `\n${tag ? `${stack.build.label}: ` : ''}Big bodies: failed: ${failed.failed}\n`,
      );
      return failed;
    }
  };
  const baselineBigBody = baseline ? await withOtherBuild(bigBodies) : undefined;
  const bigBody = await bigBodies();

  const streams = async (): Promise<StreamsResult | { failed: string } | { skipped: string }> => {
    const tag = stack.other ? ` [${stack.build.label}]` : '';
    if (!stack.proxy) return { skipped: 'no proxy running between scenarios (--cpu-prof)' };
    try {
      say(
        `streams${tag}: time to first byte and per-chunk latency, directly and through the proxy…`,
      );
      const attachPath = stack.build.name === 'current' ? '/stream-attach' : undefined;
      const result = await measureStreams(stack.endpoints!, attachPath);
      process.stdout.write(`\n${tag ? `${stack.build.label}: ` : ''}${formatStreams(result)}\n`);
      return result;
    } catch (error) {
      const failed = { failed: error instanceof Error ? error.message : String(error) };
      process.stdout.write(`\nStreams: failed: ${failed.failed}\n`);
      return failed;
    }
  };
  const baselineStreamed = baseline ? await withOtherBuild(streams) : undefined;
  const streamed = await streams();

  let workers: WorkersRun[] | { failed: string } | undefined;
  if (options.workers.length > 0) {
    try {
      workers = await compareWorkers(
        options,
        pinning,
        options.workers,
        workersScenarios(options.scenarios),
      );
      process.stdout.write(`\n${formatWorkers(workers, options)}\n`);
    } catch (error) {
      workers = { failed: error instanceof Error ? error.message : String(error) };
      process.stdout.write(`\nWorkers: failed: ${workers.failed}\n`);
    }
  }

  const last = runs[runs.length - 1] as RunResult;
  fs.mkdirSync(path.dirname(outFile), { recursive: true });
  fs.writeFileSync(
    outFile,
    `${JSON.stringify(
      {
        version: 1,
        startedAt: startedAt.toISOString(),
        finishedAt: new Date().toISOString(),
        options,
        environment: environment.data,
        runs,
        bigBody,
        streams: streamed,
        targets: targetsByRun[targetsByRun.length - 1] ?? checkTargets(last, runs),
        targetsByRun,
        targetSummary,
        ...(rounds ? { rounds } : {}),
        ...(workers ? { workers } : {}),
        ...(baseline
          ? {
              baseline: {
                ref: baseline.ref,
                commit: baseline.commit,
                cached: baseline.cached,
                root: baseline.root,
                buildWarning: baseline.buildWarning,
                table: stack.other?.table,
                runs: baselineRuns,
                bigBody: baselineBigBody,
                streams: baselineStreamed,
                targets: checkTargets(
                  baselineRuns[baselineRuns.length - 1]!,
                  baselineRuns,
                  stack.citus !== undefined,
                ),
                comparison: comparisons,
              },
            }
          : {}),
      },
      null,
      2,
    )}\n`,
  );
  process.stdout.write(`\nResults written to ${path.relative(process.cwd(), outFile)}\n`);
  return 0;
}

// ---- every child stopped on the way out: normal end, Ctrl-C, a crash ----

onUnexpectedExit((child, code) => {
  // A Ctrl-C reaches the children too; give our own SIGINT handler the chance to say so first.
  setTimeout(() => {
    if (interrupted || cleanupStarted()) return;
    process.stderr.write(`bench: ${child.name} exited unexpectedly (${code})\n${child.stderr()}\n`);
    void cleanup().finally(() => process.exit(1));
  }, 200);
});

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    if (interrupted) process.exit(130); // second signal: the exit hook kills what is left
    interrupted = true;
    say(`${signal}: stopping every child…`);
    void cleanup().finally(() => process.exit(130));
  });
}

// Last resort, synchronous: whatever cleanup did not get to (a crash, a second Ctrl-C).
process.on('exit', () => {
  killAllChildrenNow();
  const postmaster = stack.store?.postmasterPid;
  // Only if that pid is still our server (its command line names our temp dir), never a reused pid.
  if (postmaster && stack.tmpDir && commandLine(postmaster).includes(stack.tmpDir)) {
    try {
      process.kill(postmaster, 'SIGQUIT'); // immediate shutdown of an orphaned server
    } catch {
      // gone already
    }
  }
  if (stack.tmpDir) fs.rmSync(stack.tmpDir, { recursive: true, force: true });
});

function commandLine(pid: number): string {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8');
  } catch {
    return '';
  }
}

main().then(
  async (code) => {
    await cleanup();
    process.exit(code);
  },
  async (error: unknown) => {
    if (!interrupted) {
      process.stderr.write(
        `bench: ${error instanceof UsageError ? error.message : error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
      );
    }
    await cleanup();
    process.exit(interrupted ? 130 : 1);
  },
);
