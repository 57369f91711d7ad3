// Command-line options of `npm run bench` (run-bench.ts).
import { parseArgs } from 'node:util';
import { ALL_SCENARIOS, DATA_SCENARIOS } from './scenarios';
import type { ScenarioName } from './report';

export interface BenchOptions {
  readonly durationS: number;
  readonly warmupS: number;
  readonly connections: number;
  readonly quick: boolean;
  readonly scenarios: readonly ScenarioName[];
  readonly runs: number;
  /** --rounds n: after the runs, every judged ratio n times from its two scenarios back to back. */
  readonly rounds: number;
  /** JSON results file; default bench-results/<timestamp>.json. */
  readonly out: string | undefined;
  /** Profile our proxy (node --cpu-prof), one fresh process per scenario. */
  readonly cpuProf: boolean;
  /** Scale with data: rows seeded for the new-key-rows and new-key-pruning scenarios (0: not run). */
  readonly rows: number;
  /** Record the proxy's on-CPU samples with Linux perf over each measured window. */
  readonly perf: boolean;
  /** LOG_LEVEL of the proxy: `info` (one line per request, as shipped) unless told. */
  readonly logLevel: string;
  readonly poolSize: number;
  /** Extra node flags for the proxy process (e.g. --perf-basic-prof for `perf record`). */
  readonly proxyNodeArgs: readonly string[];
  /** Extra environment variables for the proxy process (e.g. glibc's MALLOC_ARENA_MAX). */
  readonly proxyEnv: Readonly<Record<string, string>>;
  /** Trace every request (OTEL_EXPORTER_OTLP_ENDPOINT) to a local sink that drops the spans. */
  readonly tracing: boolean;
  /** A git ref whose build of the proxy runs every proxy scenario too, just before the current one. */
  readonly baseline: string | undefined;
  /** A Citus coordinator (--citus-url, else CITUS_URL) for the new-key-citus scenario. */
  readonly citusUrl: string | undefined;
  /** --workers 1,2: the proxy scenarios again on a proxy per `workers:` count, side by side. */
  readonly workers: readonly number[];
}

export const USAGE = `Usage: npm run bench -- [options]

  --duration <s>       measured seconds per scenario, whole (default 10; --quick: 2)
  --warmup <s>         warm-up seconds before each scenario (default 3; --quick: 2), doubled
                       for a scenario that starts its own proxy (a cold process)
  --connections <n>    concurrent connections (default 64)
  --quick              short scenarios: the whole bench in under a minute
  --scenarios <a,b>    subset of: ${ALL_SCENARIOS.join(', ')}
  --runs <n>           repeat the whole set n times against the same proxy (RSS growth; default 1)
  --rounds <n>         after the runs, each judged ratio n more times, its two scenarios back to
                       back (order swapped every other round), and the median over the rounds
                       judged against its target (current build only; 5 takes about 10 minutes)
  --out <file>         JSON results file (default bench-results/<timestamp>.json)
  --cpu-prof           profile the proxy with V8 (node --cpu-prof): a fresh proxy per scenario,
                       alone on its core (everything else moves to the load core); profiles land
                       next to the JSON and their top self time is printed. Not comparable with
                       a plain run
  --perf               record our proxy (and the bare http-proxy) with Linux \`perf\` (on-CPU
                       samples, kernel included) over each measured window, and print where the
                       CPU goes; they run with --perf-basic-prof, which costs a few % of CPU
  --log-level <level>  the proxy's LOG_LEVEL (default info: one log line per request, as shipped)
  --pool-size <n>      the proxy's store.poolSize (default 10, the shipped default)
  --rows <n>           scale with data: after the other scenarios, new keys on a table holding n
                       live rows, then new keys while \`idempotency-proxy prune\` deletes n expired
                       ones (seeding 5 000 000 rows takes a few minutes); each of --runs seeds
                       again, so rows add up
  --proxy-node-arg <a> an extra node flag for the proxy process, repeatable
                       (e.g. --proxy-node-arg=--perf-basic-prof to read \`perf record\` output)
  --proxy-env <n=v>    an environment variable for the proxy process only, repeatable (e.g.
                       --proxy-env MALLOC_ARENA_MAX=2: glibc reads its malloc settings at start;
                       set in the bench's own environment they would reach every process)
  --tracing            the proxy traces every request (OTEL_EXPORTER_OTLP_ENDPOINT) to a local
                       OTLP sink that accepts and drops the spans (the cost of tracing on)
  --baseline <ref>     also measure that git ref's build of the proxy (built in a temporary
                       worktree, cached by commit): each proxy scenario runs on the baseline, then
                       on the current build, and the ratios current/baseline are printed
  --workers <a,b>      after the runs, pass-through, new key and replay (those of them --scenarios
                       names, if any) once more on a proxy per \`workers:\` count, unpinned (any
                       core), and req/s and CPU per request (primary and workers) side by side
  --citus-url <url>    a Citus coordinator (default: env CITUS_URL): new-key-citus runs the new-key
                       scenario on a second proxy whose table (its own) is distributed there
  -h, --help

Environment: DATABASE_URL = use that PostgreSQL instead of an embedded one (not pinned, its CPU
not measured; needs superuser for the synchronous_commit=off scenario and pg_stat_statements
preloaded for exact round-trip counts).
`;

export class UsageError extends Error {}

/**
 * What `npm run bench:instructions -- --heap-target` counts our proxy with: `off` (heapTarget: 0b,
 * the default) or `shipped` (the config's default target, as `npm start` runs).
 */
export type HeapTargetChoice = 'off' | 'shipped';

export function heapTargetChoiceOf(value: string): HeapTargetChoice {
  if (value === 'off' || value === 'shipped') return value;
  throw new UsageError(`--heap-target takes off or shipped, got "${value}"`);
}

export function parseOptions(argv: readonly string[]): BenchOptions | 'help' {
  const { values } = parseArgs({
    args: [...argv],
    options: {
      duration: { type: 'string' },
      warmup: { type: 'string' },
      connections: { type: 'string' },
      quick: { type: 'boolean', default: false },
      scenarios: { type: 'string' },
      runs: { type: 'string' },
      rounds: { type: 'string' },
      out: { type: 'string' },
      'cpu-prof': { type: 'boolean', default: false },
      perf: { type: 'boolean', default: false },
      'log-level': { type: 'string' },
      'pool-size': { type: 'string' },
      rows: { type: 'string' },
      'proxy-node-arg': { type: 'string', multiple: true },
      'proxy-env': { type: 'string', multiple: true },
      tracing: { type: 'boolean', default: false },
      baseline: { type: 'string' },
      'citus-url': { type: 'string' },
      workers: { type: 'string' },
      help: { type: 'boolean', short: 'h', default: false },
    },
    strict: true,
  });
  if (values.help) return 'help';
  const quick = values.quick === true;
  const rows = Math.round(positive('--rows', values.rows, 0, true));
  const known: readonly string[] = [...ALL_SCENARIOS, ...DATA_SCENARIOS];
  const scenarios = values.scenarios
    ? values.scenarios.split(',').map((name) => name.trim())
    : [...ALL_SCENARIOS];
  for (const name of scenarios) {
    if (!known.includes(name)) {
      throw new UsageError(`unknown scenario "${name}"; known: ${known.join(', ')}`);
    }
    if ((DATA_SCENARIOS as readonly string[]).includes(name) && rows === 0) {
      throw new UsageError(`scenario "${name}" needs --rows N`);
    }
  }
  // --rows N: new key on a table holding N live rows, then while pruning N expired ones — after
  // everything else, so the other scenarios still see an empty table.
  if (rows > 0 && !values.scenarios) scenarios.push(...DATA_SCENARIOS);
  return {
    // autocannon runs whole seconds (it stops on its once-a-second tick): round up.
    durationS: Math.ceil(positive('--duration', values.duration, quick ? 2 : 10)),
    warmupS: Math.ceil(positive('--warmup', values.warmup, quick ? 2 : 3, true)),
    connections: positive('--connections', values.connections, 64),
    quick,
    scenarios: scenarios as ScenarioName[],
    runs: positive('--runs', values.runs, 1),
    rounds: Math.round(positive('--rounds', values.rounds, 0, true)),
    out: values.out,
    cpuProf: values['cpu-prof'] === true,
    perf: values.perf === true,
    logLevel: values['log-level'] ?? 'info',
    poolSize: positive('--pool-size', values['pool-size'], 10),
    rows,
    proxyNodeArgs: [
      ...(values.perf === true ? ['--perf-basic-prof'] : []),
      ...(values['proxy-node-arg'] ?? []),
    ],
    proxyEnv: proxyEnvOf(values['proxy-env'] ?? []),
    tracing: values.tracing === true,
    baseline: values.baseline,
    citusUrl: values['citus-url'] ?? (process.env.CITUS_URL || undefined),
    workers: (values.workers ?? '')
      .split(',')
      .filter((count) => count.trim() !== '')
      .map((count) => Math.round(positive('--workers', count, 1))),
  };
}

/** NAME=VALUE pairs, as given to --proxy-env. */
function proxyEnvOf(pairs: readonly string[]): Record<string, string> {
  const env: Record<string, string> = {};
  for (const pair of pairs) {
    const match = /^([A-Za-z_][A-Za-z0-9_]*)=(.*)$/s.exec(pair);
    if (!match) {
      throw new UsageError(
        `--proxy-env expects NAME=VALUE (such as MALLOC_ARENA_MAX=2), got "${pair}"`,
      );
    }
    env[match[1]!] = match[2]!;
  }
  return env;
}

function positive(flag: string, raw: string | undefined, fallback: number, zeroOk = false): number {
  if (raw === undefined) return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value) || value < 0 || (value === 0 && !zeroOk)) {
    throw new UsageError(`${flag} expects a positive number, got "${raw}"`);
  }
  return value;
}
