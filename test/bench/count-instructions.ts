// `npm run bench:instructions`: instructions per request, counted by valgrind's callgrind, for the
// bare http-proxy and bare undici scripts, the replay floor (a bare Node server writing our replay's
// answer) and our proxy's pass-through, new-key and replay paths.
//
// CPU time per request (npm run bench) is what the targets are written in, but on a shared VM
// it drifts ±20% or more between runs, which hides a 5% difference. An instruction count does not
// depend on what else the machine runs: the same build and load give the same count within a few %.
// It is not time — cache misses and syscalls cost differently — so both are reported, side by side.
//
// Each process under test runs under callgrind with instrumentation off; after a warm-up (so V8 has
// optimised the hot paths: under valgrind that takes thousands of requests) it is switched on for a
// fixed number of requests, dumped and stopped. Threads are counted apart: the main thread (the
// event loop) and all threads (GC and compiler helpers too).
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import autocannon from 'autocannon';
import { request } from 'undici';
import { prepareBaseline } from './baseline';
import { Child, waitForMessage, spawnPinned, killAllChildrenNow } from './children';
import { type HeapTargetChoice, heapTargetChoiceOf, UsageError } from './options';
import type { ReplayAnswerMessage } from './replay-floor';
import { type Answer, BODY, replayAnswer, requestHeaders, UNIQUE_KEY } from './scenarios';
import {
  BENCH_DIR,
  type Build,
  cleanup,
  CURRENT_BUILD,
  freePort,
  type ProxyConfigFile,
  say,
  servingNodeFlags,
  sleep,
  stack,
  startStore,
  writeProxyConfig,
} from './stack';
import { StoreProbe } from './store-probe';

const USAGE = `Usage: npm run bench:instructions -- [options]

  --requests <n>   measured requests per scenario (default 4000)
  --warmup <n>     requests before measuring (default 20000; fewer leaves V8 compiling)
  --connections <n> concurrent connections (default 16)
  --scenarios <a,b> subset of: bare, bare-undici, replay-floor, passthrough, new-key, replay
                   (default: all)
  --log-level <l>  the proxy's LOG_LEVEL (default info: a log line per request, as shipped;
                   warn leaves it out, which shows what the line costs)
  --baseline <ref> also count that git ref's build of the proxy (built in a temporary worktree,
                   cached by commit), each path on both builds in turn, and print the ratio
                   current/baseline per path (OVER 5 % marks a regression)
  --repeat <n>     with --baseline: count each of our paths n times per build, alternating
                   (baseline, current, baseline, current…), and compare the means (default 1)
  --keep <dir>     copy each count's callgrind files there (one per thread; <scenario>.callgrind.1-01
                   is the main thread), to read with callgrind_annotate
  --heap-target <t> off (default): our proxy counted with heapTarget: 0b; shipped: with the
                   config's default, whose full collections a new key pays as it runs (give it
                   --requests 16000 or more, so that the window holds several of them)
  -h, --help

Needs valgrind (Debian: apt-get install valgrind). Takes ~1.5 minutes per scenario. Environment:
DATABASE_URL = use that PostgreSQL instead of an embedded one.

Our proxy is counted with heapTarget: 0b by default (the builds that have it): a window of a few
thousand requests holds none or one of the target's full collections, by chance, which moved a
cached replay's count from 126k to 262k. Without the target V8 collects on its own, two full
collections in 4000 new keys at three times the cost of one of the target's: a new key's counts of
4000 requests swing by 200k. --heap-target shipped over 16000 requests counts what the proxy
runs; three such counts of a new key read 517k-537k.
`;

interface Target {
  readonly name: string;
  readonly label: string;
  /** The script under test: a bare server (bench/<script>.js) or our proxy. */
  readonly script?: 'bare-http-proxy' | 'bare-undici' | 'replay-floor';
  readonly path: string;
  readonly key: 'unique' | 'fixed' | 'none';
}

const TARGETS: readonly Target[] = [
  {
    name: 'bare',
    label: 'bare http-proxy',
    script: 'bare-http-proxy',
    path: '/refunds',
    key: 'unique',
  },
  {
    name: 'bare-undici',
    label: 'bare undici',
    script: 'bare-undici',
    path: '/refunds',
    key: 'unique',
  },
  {
    name: 'replay-floor',
    label: 'replay floor',
    script: 'replay-floor',
    path: '/refunds',
    key: 'fixed',
  },
  { name: 'passthrough', label: 'our pass-through', path: '/pass/refunds', key: 'unique' },
  { name: 'new-key', label: 'our new key', path: '/refunds', key: 'unique' },
  { name: 'replay', label: 'our replay (cache)', path: '/refunds', key: 'fixed' },
];

interface Counted {
  readonly target: Target;
  /** The proxy build counted (the bare scripts are the bench's own: always `current`). */
  readonly build: Build['name'];
  readonly mainThread: number;
  readonly allThreads: number;
  readonly non2xx: number;
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      requests: { type: 'string', default: '4000' },
      warmup: { type: 'string', default: '20000' },
      connections: { type: 'string', default: '16' },
      scenarios: { type: 'string', default: TARGETS.map((t) => t.name).join(',') },
      'log-level': { type: 'string', default: 'info' },
      baseline: { type: 'string' },
      repeat: { type: 'string', default: '1' },
      keep: { type: 'string' },
      'heap-target': { type: 'string', default: 'off' },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
  if (values.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  const measured = Number(values.requests);
  const warmup = Number(values.warmup);
  const connections = Number(values.connections);
  const repeat = Number(values.repeat);
  if (![measured, warmup, connections, repeat].every((n) => Number.isInteger(n) && n > 0)) {
    process.stderr.write(
      `bench: --requests, --warmup, --connections and --repeat take whole numbers\n\n${USAGE}`,
    );
    return 2;
  }
  let heapTarget: HeapTargetChoice;
  try {
    heapTarget = heapTargetChoiceOf(values['heap-target']);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    process.stderr.write(`bench: ${error.message}\n\n${USAGE}`);
    return 2;
  }
  if (repeat > 1 && values.baseline === undefined) {
    process.stderr.write(`bench: --repeat goes with --baseline\n\n${USAGE}`);
    return 2;
  }
  const names = values.scenarios.split(',').map((name) => name.trim());
  const unknown = names.filter((name) => !TARGETS.some((t) => t.name === name));
  if (unknown.length > 0) {
    process.stderr.write(`bench: unknown scenario ${unknown.join(', ')}\n\n${USAGE}`);
    return 2;
  }
  const targets = TARGETS.filter((t) => names.includes(t.name));
  if (!hasValgrind()) {
    process.stderr.write('bench: valgrind is not installed (Debian: apt-get install valgrind)\n');
    return 2;
  }
  let baseline: Build | undefined;
  if (values.baseline !== undefined) {
    for (const signal of ['SIGINT', 'SIGTERM'] as const) {
      process.on(signal, () => {
        say(`${signal}: stopping…`);
        measuring?.kill('SIGKILL');
        killAllChildrenNow();
        void cleanup().finally(() => process.exit(130));
      });
    }
    try {
      baseline = await prepareBaseline(values.baseline);
    } catch (error) {
      process.stderr.write(`bench: ${(error as Error).message}\n`);
      return 2;
    }
  }

  stack.tmpDir = fs.mkdtempSync(path.join(os.tmpdir(), 'idempotency-proxy-instructions-'));
  // As root the embedded PostgreSQL runs as the postgres user, which must reach its data dir in here.
  fs.chmodSync(stack.tmpDir, 0o711);
  const upstream = spawnPinned(
    'upstream',
    process.execPath,
    [path.join(BENCH_DIR, 'upstream-server.js')],
    {
      core: undefined,
      ipc: true,
    },
  );
  stack.upstream = upstream;
  const upstreamUrl = `http://127.0.0.1:${(await waitForMessage<{ type: string; port: number }>(upstream, 'ready', 30_000)).port}`;
  // Nothing is pinned: an instruction count does not depend on which core runs it.
  const unpinned = {
    load: undefined,
    underTest: undefined,
    helpers: undefined,
    warning: undefined,
  };
  stack.store = await startStore(unpinned);
  stack.probe = await StoreProbe.open(stack.store.url);
  stack.table = `bench_instr_${randomBytes(4).toString('hex')}`;
  const config = await writeProxyConfig(stack.tmpDir, 'instructions', {
    storeUrl: stack.store.url,
    table: stack.table,
    poolSize: 10,
    upstreamUrl,
    heapTarget: heapTargetWhileCounted(CURRENT_BUILD, heapTarget),
  });
  if (!config) throw new Error('the built proxy rejects the bench configuration');
  // The baseline gets a table of its own (a table name of the same length), so neither build
  // meets the other's schema or records.
  const configs = new Map<Build['name'], ProxyConfigFile>([['current', config]]);
  if (baseline) {
    const table = `bench_instr_${randomBytes(4).toString('hex')}`;
    stack.other = { build: baseline, table, variants: {} };
    const values = {
      storeUrl: stack.store.url,
      table,
      poolSize: 10,
      upstreamUrl,
      heapTarget: heapTargetWhileCounted(baseline, heapTarget),
    };
    const own = await writeProxyConfig(stack.tmpDir, 'instructions-baseline', values, baseline);
    if (!own) throw new Error(`the ${baseline.label} build rejects the bench configuration`);
    configs.set('baseline', own);
  }

  // The floor writes what our replay writes: one replay of the current build, captured first.
  const floorAnswer = targets.some((t) => t.script === 'replay-floor')
    ? await ourReplay(config)
    : undefined;
  const results: Counted[] = [];
  for (const target of targets) {
    // Our paths run on each build in turn, baseline first; the bare scripts are the bench's own.
    const builds =
      target.script || !baseline
        ? [CURRENT_BUILD]
        : Array.from({ length: repeat }, () => [baseline, CURRENT_BUILD]).flat();
    for (const [i, build] of builds.entries()) {
      const started = Date.now();
      // Each count's callgrind files apart: <path>, or <path>-<build>-<turn> with --baseline.
      const files =
        baseline && !target.script
          ? `${target.name}-${build.name}-${Math.floor(i / 2) + 1}`
          : target.name;
      results.push(
        await count(target, build, configs.get(build.name) as ProxyConfigFile, files, {
          upstreamUrl,
          measured,
          warmup,
          connections,
          logLevel: values['log-level'],
          tag: baseline !== undefined,
          floorAnswer,
          keep: values.keep,
        }),
      );
      say(
        `  ${format(results[results.length - 1]!)}${baseline ? ` (${((Date.now() - started) / 1000).toFixed(0)} s)` : ''}`,
      );
    }
  }
  const current = targets.map((target) => mean(results, target, 'current'));
  process.stdout.write(`\n${table(current, measured, warmup, connections)}\n`);
  if (baseline) process.stdout.write(`\n${comparison(results, baseline, repeat)}\n`);
  return 0;
}

/** The process under valgrind right now (--baseline: killed on Ctrl-C). */
let measuring: ChildProcess | undefined;

/** One path on one build: start it under callgrind, warm up, count, stop. */
async function count(
  target: Target,
  build: Build,
  config: ProxyConfigFile,
  name: string,
  run: {
    upstreamUrl: string;
    measured: number;
    warmup: number;
    connections: number;
    logLevel: string;
    /** --baseline: name the build in the progress line and in the files. */
    tag: boolean;
    /** What the replay floor is given to write. */
    floorAnswer: Answer | undefined;
    /** --keep: where the callgrind files are copied, for callgrind_annotate. */
    keep: string | undefined;
  },
): Promise<Counted> {
  const { upstreamUrl, measured, warmup, connections } = run;
  const tmpDir = stack.tmpDir as string;
  const storeUrl = stack.store?.url as string;
  say(
    `${target.label}${run.tag && !target.script ? ` [${build.label}]` : ''}: ${warmup} warm-up requests, then ${measured} counted (under valgrind: slow)…`,
  );
  const port = target.script ? await freePort() : Number(new URL(config.url).port);
  const url = target.script ? `http://127.0.0.1:${port}` : config.url;
  const outPrefix = path.join(tmpDir, `${name}.callgrind`);
  const program = target.script
    ? [path.join(BENCH_DIR, `${target.script}.js`)]
    : [
        ...servingNodeFlags(build),
        path.join(build.distDir, 'main.js'),
        'serve',
        '--config',
        config.file,
      ];
  const child = spawn(
    'valgrind',
    [
      '--tool=callgrind',
      '--instr-atstart=no',
      '--separate-threads=yes',
      `--callgrind-out-file=${outPrefix}`,
      process.execPath,
      ...program,
    ],
    {
      cwd: build.root,
      // The replay floor is handed its answer over IPC (valgrind passes the channel's fd on).
      stdio:
        target.script === 'replay-floor'
          ? ['ignore', 'ignore', 'pipe', 'ipc']
          : ['ignore', 'ignore', 'pipe'],
      env: {
        ...process.env,
        BENCH_TARGET: upstreamUrl,
        BENCH_PORT: String(port),
        LOG_LEVEL: run.logLevel,
        DATABASE_URL: storeUrl,
      },
    },
  );
  measuring = child;
  try {
    if (target.script === 'replay-floor') await handOver(child, run.floorAnswer as Answer);
    await waitUntilAnswering(`${url}${target.path}`, child);
    // Each build completes a key of its own (of the same length).
    const key =
      target.key === 'fixed'
        ? await completedKey(`${url}${target.path}`, run.tag ? `-${build.name[0]}` : '')
        : UNIQUE_KEY;
    await load(`${url}${target.path}`, key, warmup, connections);
    callgrindControl('-i', 'on', child);
    const summary = await load(`${url}${target.path}`, key, measured, connections);
    callgrindControl('-i', 'off', child);
    callgrindControl('-d', undefined, child);
    const counts = await dumpedCounts(tmpDir, `${name}.callgrind`);
    if (run.keep !== undefined) keepDumps(tmpDir, `${name}.callgrind`, run.keep);
    return {
      target,
      build: build.name,
      mainThread: counts.mainThread / measured,
      allThreads: counts.allThreads / measured,
      non2xx: summary.non2xx,
    };
  } finally {
    child.kill('SIGTERM');
    await new Promise((resolve) => child.once('exit', resolve));
    measuring = undefined;
  }
}

/**
 * One replay of our proxy's (current build), read as it came: started for it without valgrind, a
 * key completed, replayed once more, stopped.
 */
async function ourReplay(config: ProxyConfigFile): Promise<Answer> {
  say('replay floor: capturing one replay of our proxy for it to write…');
  const url = `${config.url}/refunds`;
  const child = spawn(
    process.execPath,
    [
      ...servingNodeFlags(CURRENT_BUILD),
      path.join(CURRENT_BUILD.distDir, 'main.js'),
      'serve',
      '--config',
      config.file,
    ],
    {
      cwd: CURRENT_BUILD.root,
      stdio: ['ignore', 'ignore', 'pipe'],
      env: { ...process.env, DATABASE_URL: stack.store?.url },
    },
  );
  try {
    await waitUntilAnswering(url, child);
    return await replayAnswer(url, await completedKey(url, '-floor'));
  } finally {
    child.kill('SIGTERM');
    await new Promise((resolve) => child.once('exit', resolve));
  }
}

/** Gives the replay floor its answer: after its 'ready', before it is loaded. */
async function handOver(spawned: ChildProcess, answer: Answer): Promise<void> {
  const floor = new Child('the replay floor', spawned, undefined, () => undefined);
  await waitForMessage(floor, 'ready', 180_000);
  const set = waitForMessage(floor, 'answer-set', 180_000);
  const handed: ReplayAnswerMessage = {
    type: 'answer',
    status: answer.status,
    headers: answer.headers,
    bodyBase64: answer.body.toString('base64'),
  };
  spawned.send(handed);
  await set;
}

/**
 * What a build's proxy is counted with: heapTarget off where the build has it, unless `shipped`
 * (then the config's default). With the target, a window of a few thousand requests holds none or
 * one of its full collections, by chance (a cached replay read 169k and 262k instructions in two
 * counts with it, 126k and 127k without); a long window holds several.
 */
function heapTargetWhileCounted(build: Build, choice: HeapTargetChoice): string | undefined {
  if (choice === 'shipped') return undefined;
  const schema = path.join(build.distDir, 'config', 'schema.js');
  return fs.existsSync(schema) && fs.readFileSync(schema, 'utf8').includes('heapTarget')
    ? '0b'
    : undefined;
}

/** --keep: the count's callgrind files (one per thread), copied out of the temporary dir. */
function keepDumps(dir: string, prefix: string, keep: string): void {
  fs.mkdirSync(keep, { recursive: true });
  for (const file of fs.readdirSync(dir)) {
    if (file.startsWith(prefix)) fs.copyFileSync(path.join(dir, file), path.join(keep, file));
  }
}

function hasValgrind(): boolean {
  try {
    execFileSync('valgrind', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

async function waitUntilAnswering(url: string, child: ChildProcess): Promise<void> {
  const deadline = Date.now() + 180_000;
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-4000)));
  for (;;) {
    if (child.exitCode !== null) throw new Error(`the process exited during start-up:\n${stderr}`);
    try {
      const response = await request(url, {
        method: 'POST',
        headers: requestHeaders('ready-probe'),
        body: BODY,
      });
      await response.body.dump();
      if (response.statusCode < 500) return;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error(`no answer within 180 s:\n${stderr}`);
    await sleep(500);
  }
}

async function completedKey(url: string, suffix: string): Promise<string> {
  const key = `instructions-replay-${process.pid}${suffix}`;
  for (let i = 0; i < 2; i++) {
    const response = await request(url, {
      method: 'POST',
      headers: requestHeaders(key),
      body: BODY,
    });
    await response.body.dump();
  }
  return key;
}

function load(
  url: string,
  key: string,
  amount: number,
  connections: number,
): Promise<autocannon.Result> {
  return autocannon({
    url,
    method: 'POST',
    headers: requestHeaders(key),
    body: BODY,
    connections,
    amount,
    idReplacement: key === UNIQUE_KEY,
    timeout: 60,
  });
}

function callgrindControl(option: string, value: string | undefined, child: ChildProcess): void {
  const args =
    value === undefined ? [option, String(child.pid)] : [option, value, String(child.pid)];
  execFileSync('callgrind_control', args, { stdio: 'ignore' });
}

/** callgrind_control -d only asks for the dump: waits until its files are there and complete. */
async function dumpedCounts(
  dir: string,
  prefix: string,
): Promise<{ mainThread: number; allThreads: number }> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const counts = readCounts(dir, prefix);
    if (counts.mainThread > 0) {
      await sleep(1_000); // the other threads' files are written right after the main one's
      return readCounts(dir, prefix);
    }
    if (Date.now() > deadline) {
      throw new Error(`no callgrind dump in ${dir}: ${fs.readdirSync(dir).join(', ')}`);
    }
    await sleep(250);
  }
}

/** Sums the dump's per-thread files: thread 1 is the main thread. */
function readCounts(dir: string, prefix: string): { mainThread: number; allThreads: number } {
  let mainThread = 0;
  let allThreads = 0;
  for (const file of fs.readdirSync(dir)) {
    // The explicit dump is <prefix>.1-<thread>; the files written at exit hold nothing counted.
    const match = new RegExp(`^${prefix}\\.1-(\\d+)$`).exec(file);
    if (!match) continue;
    const text = fs.readFileSync(path.join(dir, file), 'utf8');
    // The header's `summary:` is 0 for an explicit dump; the count is the `totals:` line at the end.
    const total = /^totals:\s+(\d+)/m.exec(text);
    const count = total ? Number(total[1]) : 0;
    allThreads += count;
    if (Number(match[1]) === 1) mainThread += count;
  }
  return { mainThread, allThreads };
}

function format(result: Counted): string {
  return `${Math.round(result.mainThread / 1000)}k instructions/request on the main thread, ${Math.round(result.allThreads / 1000)}k in all threads${result.non2xx ? ` (${result.non2xx} non-2xx!)` : ''}`;
}

function table(
  results: readonly Counted[],
  measured: number,
  warmup: number,
  connections: number,
): string {
  const byName = new Map(results.map((r) => [r.target.name, r]));
  const bare = byName.get('bare');
  const bareUndici = byName.get('bare-undici');
  const pass = byName.get('passthrough');
  const ratio = (a: number | undefined, b: number | undefined): string =>
    a && b ? `${(a / b).toFixed(2)}×` : '—';
  const lines = [
    `Instructions per request (callgrind; ${measured} requests counted after ${warmup} warm-up, ${connections} connections)`,
    '',
    'scenario              main thread  all threads  vs http-proxy (main/all)  vs bare undici (main/all)  vs pass-through (main/all)',
  ];
  for (const r of results) {
    lines.push(
      [
        r.target.label.padEnd(20),
        `${Math.round(r.mainThread / 1000)}k`.padStart(12),
        `${Math.round(r.allThreads / 1000)}k`.padStart(12),
        `${ratio(r.mainThread, bare?.mainThread)} / ${ratio(r.allThreads, bare?.allThreads)}`.padStart(
          24,
        ),
        `${ratio(r.mainThread, bareUndici?.mainThread)} / ${ratio(r.allThreads, bareUndici?.allThreads)}`.padStart(
          25,
        ),
        `${ratio(r.mainThread, pass?.mainThread)} / ${ratio(r.allThreads, pass?.allThreads)}`.padStart(
          27,
        ),
      ].join('  ') + (r.non2xx ? `  (${r.non2xx} non-2xx)` : ''),
    );
  }
  const floor = byName.get('replay-floor');
  const replay = byName.get('replay');
  if (floor && replay) {
    lines.push(
      '',
      `our replay ÷ the replay floor: ${ratio(replay.mainThread, floor.mainThread)} main thread, ${ratio(replay.allThreads, floor.allThreads)} all threads`,
    );
  }
  return lines.join('\n');
}

/** The mean of a path's counts on one build (one count unless --repeat). */
function mean(results: readonly Counted[], target: Target, build: Build['name']): Counted {
  const mine = results.filter((r) => r.target === target && r.build === build);
  const avg = (pick: (r: Counted) => number): number =>
    mine.reduce((sum, r) => sum + pick(r), 0) / Math.max(1, mine.length);
  return {
    target,
    build,
    mainThread: avg((r) => r.mainThread),
    allThreads: avg((r) => r.allThreads),
    non2xx: mine.reduce((sum, r) => sum + r.non2xx, 0),
  };
}

/** --baseline: per path, baseline and current side by side, the ratio and the 5 % mark. */
function comparison(results: readonly Counted[], baseline: Build, repeat: number): string {
  const LIMIT = 1.05;
  const k = (n: number): string => `${Math.round(n / 1000)}k`;
  const mark = (ratio: number): string =>
    `${ratio.toFixed(3)}× ${ratio <= LIMIT ? 'within 5 %' : 'OVER 5 %'}`;
  const lines = [
    `Current vs ${baseline.label}${baseline.cached ? ', cached build' : ''}: instructions per request, each of our paths counted on both builds in this run, ` +
      (repeat > 1
        ? `${repeat} times each, alternating (baseline first); means compared`
        : 'baseline first'),
    ...(baseline.buildWarning
      ? [`  (the baseline built with type errors: ${baseline.buildWarning})`]
      : []),
    '',
    'scenario              baseline main / all    current main / all    current/baseline main      current/baseline all',
  ];
  const over: string[] = [];
  const paths = [...new Set(results.filter((r) => !r.target.script).map((r) => r.target))];
  for (const target of paths) {
    const base = mean(results, target, 'baseline');
    const cur = mean(results, target, 'current');
    const main = cur.mainThread / base.mainThread;
    const all = cur.allThreads / base.allThreads;
    // Judged on the main thread (the event loop): helper threads (GC, compiler) vary more.
    if (main > LIMIT) over.push(target.label);
    lines.push(
      [
        target.label.padEnd(20),
        `${k(base.mainThread)} / ${k(base.allThreads)}`.padStart(21),
        `${k(cur.mainThread)} / ${k(cur.allThreads)}`.padStart(20),
        mark(main).padStart(23),
        `${all.toFixed(3)}× (not judged)`.padStart(25),
      ].join('  ') +
        (cur.non2xx || base.non2xx ? `  (non-2xx: ${base.non2xx} / ${cur.non2xx})` : ''),
    );
    if (repeat > 1) {
      const each = (build: Build['name']): string =>
        results
          .filter((r) => r.target === target && r.build === build)
          .map((r) => `${k(r.mainThread)}/${k(r.allThreads)}`)
          .join(', ');
      lines.push(
        `    each count (main/all): baseline ${each('baseline')}; current ${each('current')}`,
      );
    }
  }
  lines.push(
    '',
    over.length === 0
      ? `No path over 5 % more main-thread instructions per request than the baseline (limit: current/baseline ≤ ${LIMIT.toFixed(2)}; all threads shown, not judged: GC and compiler threads vary more).`
      : `OVER 5 %: ${over.join(', ')} (main thread, current/baseline > ${LIMIT.toFixed(2)}).`,
  );
  return lines.join('\n');
}

main()
  .then(async (code) => {
    await cleanup();
    process.exit(code);
  })
  .catch(async (error: unknown) => {
    process.stderr.write(`bench: ${(error as Error).stack ?? String(error)}\n`);
    killAllChildrenNow();
    await cleanup();
    process.exit(1);
  });
