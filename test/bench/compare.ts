// --baseline for `npm run bench`: the baseline's and the current build's results of one run, side by
// side, and their ratios current/baseline (informational, like the targets).
import type { RunResult, ScenarioName, ScenarioResult } from './report';
import type { Build } from './stack';

export interface BuildComparison {
  readonly run: number;
  readonly scenarios: readonly {
    readonly name: ScenarioName;
    readonly label: string;
    readonly requestsPerS: Figures;
    readonly proxyCpuMicrosPerRequest: Figures;
    readonly postgresCpuMicrosPerRequest: Figures;
    readonly p99Ms: Figures;
  }[];
}

interface Figures {
  readonly baseline: number | undefined;
  readonly current: number | undefined;
  /** current / baseline */
  readonly ratio: number | undefined;
}

/** Scenarios measured on both builds: the ones where the baseline has a result of its own. */
function pairs(
  baseline: RunResult,
  current: RunResult,
): { base: ScenarioResult; cur: ScenarioResult }[] {
  const out: { base: ScenarioResult; cur: ScenarioResult }[] = [];
  for (const cur of current.scenarios) {
    const base = baseline.scenarios.find((s) => s.name === cur.name);
    if (base && base !== cur) out.push({ base, cur });
  }
  return out;
}

export function compareRuns(baseline: RunResult, current: RunResult): BuildComparison {
  const figures = (b: number | undefined, c: number | undefined): Figures => ({
    baseline: b,
    current: c,
    ratio: b !== undefined && c !== undefined && b > 0 ? c / b : undefined,
  });
  return {
    run: current.index,
    scenarios: pairs(baseline, current).map(({ base, cur }) => ({
      name: cur.name,
      label: cur.label,
      requestsPerS: figures(base.requestsPerS, cur.requestsPerS),
      proxyCpuMicrosPerRequest: figures(
        base.cpuMicrosPerRequest?.proxy,
        cur.cpuMicrosPerRequest?.proxy,
      ),
      postgresCpuMicrosPerRequest: figures(
        base.cpuMicrosPerRequest?.postgres,
        cur.cpuMicrosPerRequest?.postgres,
      ),
      p99Ms: figures(base.load?.latencyMs.p99, cur.load?.latencyMs.p99),
    })),
  };
}

/** One run for the table: each scenario on both builds, the baseline's row first. */
export function sideBySide(baseline: RunResult, current: RunResult): RunResult {
  const scenarios: ScenarioResult[] = [];
  for (const cur of current.scenarios) {
    const base = baseline.scenarios.find((s) => s.name === cur.name);
    if (base && base !== cur) {
      scenarios.push({ ...base, label: `${base.label} [baseline]` });
      scenarios.push({ ...cur, label: `${cur.label} [current]` });
    } else scenarios.push(cur);
  }
  return { ...current, scenarios };
}

export function formatComparison(comparison: BuildComparison, baseline: Build): string {
  const num = (value: number | undefined, digits: number): string =>
    value === undefined || !Number.isFinite(value) ? '—' : value.toFixed(digits);
  const ratio = (figures: Figures): string =>
    figures.ratio === undefined ? '—' : `${figures.ratio.toFixed(2)}×`;
  const header = [
    'scenario',
    'req/s base',
    'req/s cur',
    'cur/base',
    'proxy µs/req base',
    'proxy µs/req cur',
    'cur/base',
    'pg µs/req cur/base',
    'p99 ms base / cur',
  ];
  const rows = comparison.scenarios.map((s) => [
    s.label,
    num(s.requestsPerS.baseline, 0),
    num(s.requestsPerS.current, 0),
    ratio(s.requestsPerS),
    num(s.proxyCpuMicrosPerRequest.baseline, 1),
    num(s.proxyCpuMicrosPerRequest.current, 1),
    ratio(s.proxyCpuMicrosPerRequest),
    ratio(s.postgresCpuMicrosPerRequest),
    `${num(s.p99Ms.baseline, 0)} / ${num(s.p99Ms.current, 0)}`,
  ]);
  const widths = header.map((title, i) =>
    Math.max(title.length, ...rows.map((row) => (row[i] ?? '').length)),
  );
  const line = (cells: string[]): string =>
    cells
      .map((cell, i) => (i === 0 ? cell.padEnd(widths[i] ?? 0) : cell.padStart(widths[i] ?? 0)))
      .join('  ');
  return [
    `Current vs ${baseline.label}, run ${comparison.run}: each proxy scenario on the baseline, then on the current build (ratios current/baseline; informational — timed figures drift, npm run bench:instructions -- --baseline judges 5 %)`,
    '',
    line(header),
    widths.map((width) => '─'.repeat(width)).join('  '),
    ...rows.map(line),
  ].join('\n');
}
