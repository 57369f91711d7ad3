// --rounds n: the ratios the targets judge, each taken within a round from its two scenarios run back
// to back (one after the other, their order swapped every other round so that drift favours
// neither), and the median over the rounds judged against the target. A ratio taken within one
// round compares two measurements a few seconds apart; across a whole run, the machine's speed can
// drift between them by more than the gap a target asks about.
import { JUDGED_RATIOS, ratioOf } from './judged-ratios';
import { formatTargets, type ScenarioName, type ScenarioResult } from './report';

export interface RoundsResult {
  readonly rounds: number;
  readonly targets: readonly {
    readonly target: string;
    /** Each round's ratio, in order (undefined: a scenario of it failed or was skipped). */
    readonly values: readonly (number | undefined)[];
    readonly median: number | undefined;
    readonly met: boolean | undefined;
  }[];
}

/**
 * Runs `rounds` rounds of every pair whose scenarios `names` includes, with `attempt` (one
 * scenario, its warm-up and measured window).
 */
export async function runRounds(
  rounds: number,
  names: readonly ScenarioName[],
  attempt: (name: ScenarioName, round: number) => Promise<ScenarioResult>,
): Promise<RoundsResult> {
  const pairs = JUDGED_RATIOS.filter(
    (p) => names.includes(p.numerator) && names.includes(p.denominator),
  );
  const values = pairs.map((): (number | undefined)[] => []);
  for (let round = 1; round <= rounds; round++) {
    for (const [i, p] of pairs.entries()) {
      const order = round % 2 === 1 ? [p.numerator, p.denominator] : [p.denominator, p.numerator];
      const results = new Map<ScenarioName, ScenarioResult>();
      for (const name of order) results.set(name, await attempt(name, round));
      values[i]!.push(ratioOf(p, results.get(p.numerator), results.get(p.denominator)));
    }
  }
  return {
    rounds,
    targets: pairs.map((p, i) => {
      const median = medianOf(values[i]!);
      const met =
        median === undefined ? undefined : p.atMost ? median <= p.limit : median >= p.limit;
      return { target: p.target, values: values[i]!, median, met };
    }),
  };
}

/** The median of the measured values; undefined when none was. */
export function medianOf(values: readonly (number | undefined)[]): number | undefined {
  const measured = values.filter((v): v is number => v !== undefined).sort((a, b) => a - b);
  if (measured.length === 0) return undefined;
  const middle = Math.floor(measured.length / 2);
  return measured.length % 2 === 1
    ? measured[middle]
    : (measured[middle - 1]! + measured[middle]!) / 2;
}

export function formatRounds(result: RoundsResult): string {
  const checks = result.targets.map((t) => {
    const each = t.values.map((v) => (v === undefined ? '—' : `${v.toFixed(2)}×`)).join(' ');
    const median = t.median === undefined ? 'not measured' : `${t.median.toFixed(2)}×`;
    return { target: t.target, measured: `median ${median}  (rounds: ${each})`, pass: t.met };
  });
  return (
    `Ratios within a round (each pair back to back, order swapped every other round), median over ${result.rounds} round${result.rounds === 1 ? '' : 's'}:\n` +
    formatTargets(checks)
  );
}
