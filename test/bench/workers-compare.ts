// --workers 1,2: the proxy scenarios once per `workers:` count, each on a proxy of its own started
// with that count, printed side by side: req/s and CPU per request (the primary and its workers
// together). Every count runs unpinned — its processes may use any core — so one worker and two get
// the same machine; the upstream and PostgreSQL stay where the bench put them, and the load
// generator shares the cores. On a machine with few cores the numbers say what a second process
// costs more than what it gains.
import type { Pinning } from './environment';
import { runScenario } from './measure';
import type { BenchOptions } from './options';
import type { ScenarioName, ScenarioResult } from './report';
import { SCENARIOS } from './scenarios';
import { say, stack, startProxy, writeProxyConfig } from './stack';

export interface WorkersRun {
  readonly workers: number;
  readonly scenarios: readonly ScenarioResult[];
}

const COMPARED: readonly ScenarioName[] = ['passthrough', 'new-key', 'replay'];

/** Pass-through, new key and replay: those of them `names` has, or all three if it has none. */
export function workersScenarios(names: readonly ScenarioName[]): ScenarioName[] {
  const named = COMPARED.filter((name) => names.includes(name));
  return named.length > 0 ? named : [...COMPARED];
}

export async function compareWorkers(
  options: BenchOptions,
  pinning: Pinning,
  counts: readonly number[],
  names: readonly ScenarioName[],
): Promise<WorkersRun[]> {
  const runs: WorkersRun[] = [];
  const unpinned: Pinning = { ...pinning, underTest: undefined };
  const saved = { proxy: stack.proxy, endpoints: stack.endpoints };
  for (const workers of counts) {
    const config = await writeProxyConfig(stack.tmpDir as string, `bench-workers-${workers}`, {
      storeUrl: stack.store!.url,
      table: stack.table as string,
      poolSize: options.poolSize,
      upstreamUrl: stack.endpoints!.upstream,
      workers,
    });
    if (!config) throw new Error(`the ${stack.build.label} build rejects workers: ${workers}`);
    const proxy = await startProxy(options, unpinned, config);
    stack.proxy = proxy;
    stack.endpoints = { ...saved.endpoints!, proxy: config.url };
    const scenarios: ScenarioResult[] = [];
    try {
      for (const name of names) {
        say(`workers: ${workers}: ${SCENARIOS[name].label}…`);
        scenarios.push(await runScenario(SCENARIOS[name], 1, options, unpinned, undefined));
      }
    } finally {
      await proxy.stop(15_000);
      stack.proxy = saved.proxy;
      stack.endpoints = saved.endpoints;
    }
    runs.push({ workers, scenarios });
  }
  return runs;
}

/** One row per scenario: req/s and CPU per request for each count, and each against the first. */
export function formatWorkers(runs: readonly WorkersRun[], options: BenchOptions): string {
  const first = runs[0];
  if (!first) return '';
  const header = [
    'scenario',
    ...runs.map((run) => `req/s (${run.workers})`),
    ...runs.slice(1).map((run) => `× (${run.workers}/${first.workers})`),
    ...runs.map((run) => `proxy µs/req (${run.workers})`),
    ...runs.map((run) => `PG µs/req (${run.workers})`),
    ...runs.map((run) => `errors (${run.workers})`),
  ];
  const rows = first.scenarios.map((scenario, i) => {
    const of = (run: WorkersRun) => run.scenarios[i];
    const fixed = (value: number | undefined, digits = 1) =>
      value === undefined ? '—' : value.toFixed(digits);
    const rate = (run: WorkersRun) => of(run)?.requestsPerS;
    return [
      scenario.label,
      ...runs.map((run) => fixed(rate(run), 0)),
      ...runs.slice(1).map((run) => {
        const [a, b] = [rate(first), rate(run)];
        return a && b ? `${(b / a).toFixed(2)}×` : '—';
      }),
      ...runs.map((run) => fixed(of(run)?.cpuMicrosPerRequest?.proxy)),
      ...runs.map((run) => fixed(of(run)?.cpuMicrosPerRequest?.postgres)),
      ...runs.map((run) => {
        const result = of(run);
        return result?.skipped ? 'skipped' : String(result?.unexpected ?? '—');
      }),
    ];
  });
  const widths = header.map((cell, column) =>
    Math.max(cell.length, ...rows.map((row) => row[column]!.length)),
  );
  const line = (cells: readonly string[]) =>
    `| ${cells.map((cell, column) => cell.padEnd(widths[column]!)).join(' | ')} |`;
  return [
    `Workers — the proxy unpinned (its processes may use every core) with workers: ${runs.map((run) => run.workers).join(', ')}; ${options.connections} connections, ${options.durationS} s per scenario after ${options.warmupS} s warm-up (the first on a cold proxy).`,
    'CPU per request is the primary and its workers together (µs); PG is the embedded PostgreSQL (— on DATABASE_URL).',
    '',
    line(header),
    line(widths.map((width) => '-'.repeat(width))),
    ...rows.map(line),
  ].join('\n');
}
