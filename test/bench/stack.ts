// Everything the bench starts — load generator, upstream, the bare forwarders, PostgreSQL, our proxy —
// in one registry, so that cleanup (normal end, Ctrl-C, a crash) can stop all of it and remove the
// temp dir. Also starts the proxy from a generated config and waits until it answers.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { request } from 'undici';
import { type Child, spawnPinned, waitForMessage } from './children';
import type { Pinning } from './environment';
import type { LoadResultMessage, LoadSpec, LoadSummary } from './load';
import type { BenchOptions } from './options';
import type { RssSampler } from './proc-stats';
import type { ConfigVariant, Endpoints } from './scenarios';
import type { StoreProbe } from './store-probe';

export const BENCH_DIR = __dirname; // dist/bench
export const DIST_DIR = path.resolve(__dirname, '..');
export const ROOT = path.resolve(__dirname, '..', '..');

/** A build of the proxy: where its dist/main.js is and where it runs from (its package.json). */
export interface Build {
  readonly name: 'current' | 'baseline';
  /** How the report names it: `current`, or `baseline <ref> (<short commit>)`. */
  readonly label: string;
  /** The proxy's working directory: holds the build's package.json. */
  readonly root: string;
  readonly distDir: string;
  /** --baseline: the ref as given, the commit it names, whether the build came from the cache. */
  readonly ref?: string;
  readonly commit?: string;
  readonly cached?: boolean;
  /** --baseline: what tsc reported when it built with errors but emitted (else undefined). */
  readonly buildWarning?: string;
}

/**
 * The node flags `npm start` gives the proxy in that build (its package.json's start script, which
 * the Docker image's entrypoint repeats): the bench runs the proxy as it ships, and a baseline build
 * as it shipped then.
 */
export function servingNodeFlags(build: Build): string[] {
  const { scripts } = JSON.parse(
    fs.readFileSync(path.join(build.root, 'package.json'), 'utf8'),
  ) as {
    scripts?: Record<string, string>;
  };
  const words = (scripts?.start ?? '').split(/\s+/);
  const script = words.indexOf('dist/main.js');
  const flags = words[0] === 'node' && script > 0 ? words.slice(1, script) : [];
  return [...flags, ...restartHeapFlags(build, flags)];
}

/**
 * The heap sizes a build's `serve` restarts itself with when node was given none (builds since
 * heap-tuning.ts has servingHeapFlags): passed up front, so the proxy runs as it would, and a
 * process under valgrind is not replaced by one that is not.
 */
function restartHeapFlags(build: Build, flags: readonly string[]): readonly string[] {
  const file = path.join(build.distDir, 'heap-tuning.js');
  if (!fs.existsSync(file)) return [];
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const tuning = require(file) as {
    servingHeapFlags?: (execArgv: readonly string[], nodeOptions?: string) => readonly string[];
  };
  return tuning.servingHeapFlags?.(flags, process.env.NODE_OPTIONS) ?? [];
}

/** The checkout this bench was built from. */
export const CURRENT_BUILD: Build = {
  name: 'current',
  label: 'current',
  root: ROOT,
  distDir: DIST_DIR,
};

/** What one build runs with: its table, its configs and its long-lived proxy (--baseline). */
export interface BuildSide {
  build: Build;
  table?: string;
  proxy?: Child;
  proxyConfig?: ProxyConfigFile;
  variants: Partial<Record<ConfigVariant, ProxyConfigFile>>;
}

export interface Store {
  readonly url: string;
  readonly embedded: boolean;
  readonly child?: Child;
  readonly postmasterPid?: number;
}

/** Everything started so far: what cleanup must stop. Filled in as the bench starts things. */
export interface Stack {
  tmpDir?: string;
  load?: LoadGenerator;
  upstream?: Child;
  bare?: Child;
  bareUndici?: Child;
  /** The peer: fastify with @fastify/http-proxy (fastify-proxy.ts). */
  fastify?: Child;
  /** The bare Node server that writes our replay's answer (replay-floor.ts). */
  replayFloor?: Child;
  /**
   * --citus-url: a proxy config on that store (a table of its own) for new-key-citus, and a probe
   * counting statements on its coordinator.
   */
  citus?: {
    readonly url: string;
    readonly table: string;
    config: ProxyConfigFile;
    probe: StoreProbe;
  };
  /** --tracing: the OTLP sink (an upstream-server: a 201 to every POST, the body dropped). */
  otlpSink?: { readonly child: Child; readonly url: string };
  store?: Store;
  probe?: StoreProbe;
  table?: string;
  proxy?: Child;
  sampler?: RssSampler;
  endpoints?: Endpoints;
  /** The proxy's generated config, and where a proxy started from it listens. */
  proxyConfig?: ProxyConfigFile;
  /** The same with one store option changed (scenarios.ts CONFIG_VARIANTS), where the build has it. */
  variants: Partial<Record<ConfigVariant, ProxyConfigFile>>;
  /** Where --perf recordings go; the proxies' perf maps (/tmp/perf-<pid>.map) are removed at exit. */
  perfDir?: string;
  /** Processes run with --perf-basic-prof (our proxies, the bare forwarders under --perf). */
  profiledPids: number[];
  /** The build whose proxy the fields above (table, proxy, proxyConfig, variants) belong to. */
  build: Build;
  /** --baseline: the other build's fields, swapped in by swapBuilds() for its turn. */
  other?: BuildSide;
}

export const stack: Stack = { profiledPids: [], variants: {}, build: CURRENT_BUILD };

/**
 * --baseline: makes the other build the one under test (its table, configs, proxy, endpoint) and
 * keeps this one aside; called again, swaps back. Without a baseline it does nothing.
 */
export function swapBuilds(): void {
  const other = stack.other;
  if (!other) return;
  stack.other = {
    build: stack.build,
    table: stack.table,
    proxy: stack.proxy,
    proxyConfig: stack.proxyConfig,
    variants: stack.variants,
  };
  stack.build = other.build;
  stack.table = other.table;
  stack.proxy = other.proxy;
  stack.proxyConfig = other.proxyConfig;
  stack.variants = other.variants;
  if (stack.endpoints && stack.proxyConfig) {
    stack.endpoints = { ...stack.endpoints, proxy: stack.proxyConfig.url };
  }
}

/** Runs `fn` with the other build under test (--baseline), then swaps back, also on failure. */
export async function withOtherBuild<T>(fn: () => Promise<T>): Promise<T> {
  swapBuilds();
  try {
    return await fn();
  } finally {
    swapBuilds();
  }
}

/** `baseline-` or `current-` when two builds are measured (file names of recordings), else ''. */
export function buildTag(): string {
  return stack.other ? `${stack.build.name}-` : '';
}

export interface ProxyConfigFile {
  readonly file: string;
  /** The store it names (the proxy gets it as DATABASE_URL too). */
  readonly storeUrl: string;
  readonly url: string;
  /** The admin listener (metrics). */
  readonly adminUrl: string;
}

/** The autocannon child: one run at a time over IPC. */
export class LoadGenerator {
  private nextId = 1;
  private readonly pending = new Map<
    number,
    { resolve: (summary: LoadSummary) => void; reject: (error: Error) => void }
  >();

  constructor(readonly child: Child) {
    child.process.on('message', (message: LoadResultMessage) => {
      if (message?.type !== 'result') return;
      const waiter = this.pending.get(message.id);
      this.pending.delete(message.id);
      if (message.summary) waiter?.resolve(message.summary);
      else waiter?.reject(new Error(`load generator: ${message.error ?? 'no result'}`));
    });
    child.process.once('exit', () => {
      for (const waiter of this.pending.values()) waiter.reject(new Error('load generator exited'));
      this.pending.clear();
    });
  }

  run(spec: LoadSpec): Promise<LoadSummary> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      // autocannon stops itself after durationS; a run that never answers means a wedged target.
      const timer = setTimeout(
        () => {
          this.pending.delete(id);
          reject(
            new Error(
              `the load generator did not finish a ${spec.durationS} s run within 60 s of its end`,
            ),
          );
        },
        spec.durationS * 1000 + 60_000,
      );
      this.pending.set(id, {
        resolve: (summary) => {
          clearTimeout(timer);
          resolve(summary);
        },
        reject: (error) => {
          clearTimeout(timer);
          reject(error);
        },
      });
      this.child.process.send({ type: 'run', id, spec });
    });
  }
}

export async function startProxy(
  options: BenchOptions,
  pinning: Pinning,
  config: ProxyConfigFile,
  profile?: { dir: string; name: string },
): Promise<Child> {
  const args = [
    ...servingNodeFlags(stack.build),
    ...options.proxyNodeArgs,
    ...(profile
      ? ['--cpu-prof', '--cpu-prof-dir', profile.dir, '--cpu-prof-name', profile.name]
      : []),
    path.join(stack.build.distDir, 'main.js'),
    'serve',
    '--config',
    config.file,
  ];
  const proxy = spawnPinned('proxy', process.execPath, args, {
    core: pinning.underTest,
    cwd: stack.build.root,
    // DATABASE_URL overrides store.url: make it the config's store either way.
    env: {
      ...process.env,
      LOG_LEVEL: options.logLevel,
      DATABASE_URL: config.storeUrl,
      ...(stack.otlpSink ? { OTEL_EXPORTER_OTLP_ENDPOINT: stack.otlpSink.url } : {}),
      ...options.proxyEnv,
    },
  });
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (!proxy.running) throw new Error(`the proxy exited during start-up:\n${proxy.stderr()}`);
    try {
      const response = await request(`${config.url}/pass/ready`);
      await response.body.dump();
      if (response.statusCode === 200) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline)
      throw new Error(`the proxy did not answer within 60 s:\n${proxy.stderr()}`);
    await sleep(100);
  }
  stack.sampler?.watch(proxy.pid);
  stack.profiledPids.push(proxy.pid);
  return proxy;
}

export async function startStore(pinning: Pinning): Promise<Store> {
  const external = process.env.DATABASE_URL;
  if (external) {
    say('using the PostgreSQL at DATABASE_URL (not pinned; its CPU is not measured)…');
    return { url: external, embedded: false };
  }
  say('starting the embedded PostgreSQL (initdb, then a restart with pg_stat_statements)…');
  const child = spawnPinned('postgres', process.execPath, [path.join(BENCH_DIR, 'pg-server.js')], {
    core: pinning.helpers,
    ipc: true,
    env: { ...process.env, BENCH_PG_DATA_DIR: path.join(stack.tmpDir as string, 'pg') },
  });
  const ready = await waitForMessage<{ type: string; url: string; postmasterPid: number }>(
    child,
    'ready',
    120_000,
  );
  return { url: ready.url, embedded: true, child, postmasterPid: ready.postmasterPid };
}

/**
 * Writes a config for the proxy on free ports; undefined when the built proxy (stack.build's, unless
 * told) rejects it.
 */
export async function writeProxyConfig(
  dir: string,
  name: string,
  values: {
    storeUrl: string;
    table: string;
    poolSize: number;
    upstreamUrl: string;
    /** One more line under `store:` (an option only newer builds may have). */
    storeOption?: string;
    /** `workers:` (--workers); none: the build's default, one process. */
    workers?: number;
    /** `heapTarget:` (a size); none: the build's default. Only builds that have the setting. */
    heapTarget?: string;
  },
  build: Build = stack.build,
): Promise<ProxyConfigFile | undefined> {
  const file = path.join(dir, `${name}.yaml`);
  const port = await freePort();
  const adminPort = await freePort();
  fs.writeFileSync(
    file,
    `# Generated by test/bench/stack.ts for npm run bench.
listen: { host: 127.0.0.1, port: ${port} }
shutdownGrace: 2s${values.workers === undefined ? '' : `\nworkers: ${values.workers}`}${values.heapTarget === undefined ? '' : `\nheapTarget: ${values.heapTarget}`}
admin: { host: 127.0.0.1, port: ${adminPort} }
store:
  url: ${JSON.stringify(values.storeUrl)}
  table: ${values.table}
  poolSize: ${values.poolSize}${values.storeOption ? `\n  ${values.storeOption}` : ''}
upstreams:
  app: { url: ${JSON.stringify(values.upstreamUrl)}, timeout: 30s }
  # The 409 storm holds one request for the whole scenario: long timeout, longer lease.
  slow: { url: ${JSON.stringify(values.upstreamUrl)}, timeout: 10m }
routes:
  - name: refunds
    match: { method: POST, path: /refunds }
    upstream: app
    idempotency: {}
  - name: slow
    match: { method: POST, path: /slow }
    upstream: slow
    idempotency: { lockTimeout: 15m }
  - name: stream
    match: { method: POST, path: /stream }
    upstream: app
    idempotency: {}${
      // onConcurrent: attach is new: only this build's config has the route (a baseline has not).
      build.name === 'current'
        ? `
  - name: stream-attach
    match: { method: POST, path: /stream-attach }
    upstream: app
    idempotency: { onConcurrent: attach }`
        : ''
    }
  - name: passthrough
    match: { path: /** }
    upstream: app
    idempotency: false
`,
  );
  try {
    execFileSync(
      process.execPath,
      [path.join(build.distDir, 'main.js'), 'check', '--config', file],
      {
        stdio: 'ignore',
        cwd: build.root,
      },
    );
  } catch {
    return undefined;
  }
  return {
    file,
    storeUrl: values.storeUrl,
    url: `http://127.0.0.1:${port}`,
    adminUrl: `http://127.0.0.1:${adminPort}`,
  };
}

/**
 * A port no process listens on, below the kernel's range for outgoing connections: a port the
 * kernel handed out (listen on 0) is free only until an outgoing connection is given it as its own
 * end, and the load generator and the pools open thousands a second. One such run lost a proxy that
 * started a few seconds later to EADDRINUSE.
 */
export async function freePort(): Promise<number> {
  // The proxy's own finder (src/embedded/embedded.ts), from the build next to this bench: the same
  // range, and never a port fetch refuses to call. The bench compiles apart from src/, so it is
  // loaded from the build.
  const finder = (await import(path.join(DIST_DIR, 'embedded', 'embedded.js'))) as {
    findFreePort(): Promise<number>;
  };
  return finder.findFreePort();
}

export const stamp = (date: Date): string => date.toISOString().replace(/[:.]/g, '-');
export const sleep = (ms: number): Promise<void> =>
  new Promise((resolve) => setTimeout(resolve, ms));
export const say = (line: string): void => void process.stderr.write(`bench: ${line}\n`);
export const debug = (line: string): void => {
  if (process.env.BENCH_DEBUG) say(line);
};

// ---- cleanup: every child stopped, the embedded server stopped, its temp dir removed ----

let cleaning: Promise<void> | undefined;

export function cleanupStarted(): boolean {
  return cleaning !== undefined;
}

export function cleanup(): Promise<void> {
  cleaning ??= (async () => {
    stack.sampler?.stop();
    await Promise.allSettled(
      [
        stack.proxy,
        stack.other?.proxy,
        stack.bare,
        stack.bareUndici,
        stack.fastify,
        stack.replayFloor,
        stack.upstream,
        stack.otlpSink?.child,
        stack.load?.child,
      ].map((child) => child?.stop(10_000)),
    );
    if (stack.probe) {
      try {
        if (stack.store && !stack.store.embedded) {
          for (const table of [stack.table, stack.other?.table]) {
            if (table) await stack.probe.dropTable(table);
          }
        }
        await stack.probe.close(); // also resets synchronous_commit if a scenario changed it
      } catch {
        // the server may already be gone
      }
    }
    if (stack.citus) {
      try {
        await stack.citus.probe.dropTable(stack.citus.table);
        await stack.citus.probe.close();
      } catch {
        // the cluster may be gone
      }
    }
    const pg = stack.store?.child;
    if (pg?.running) {
      pg.expectExit();
      pg.process.send({ type: 'stop' });
      await Promise.race([pg.exited, sleep(20_000)]);
      await pg.stop(5_000);
    }
    if (stack.tmpDir) fs.rmSync(stack.tmpDir, { recursive: true, force: true });
    if (stack.perfDir) {
      // Kept beside the recordings: copy one back to /tmp to run `perf script` on them again.
      for (const pid of stack.profiledPids) {
        const map = `/tmp/perf-${pid}.map`;
        if (!fs.existsSync(map)) continue;
        fs.mkdirSync(stack.perfDir, { recursive: true });
        fs.copyFileSync(map, path.join(stack.perfDir, path.basename(map)));
        fs.rmSync(map, { force: true });
      }
    }
  })();
  return cleaning;
}
