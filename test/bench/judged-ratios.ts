// The floor issue's ratio targets, defined once: report.ts judges them in every run, rounds.ts
// (--rounds) within rounds, from their two scenarios back to back.
import type { ScenarioName, ScenarioResult } from './report';

/** One judged ratio: numerator ÷ denominator, of CPU per request or of req/s. */
export interface JudgedRatio {
  readonly target: string;
  readonly numerator: ScenarioName;
  readonly denominator: ScenarioName;
  readonly of: 'cpu' | 'rps';
  readonly limit: number;
  readonly atMost: boolean;
}

/**
 * Replays against the bare Node server that writes the same answer, forwarding against the bare
 * undici script (the Node floor) and the bare http-proxy, a new key against our pass-through.
 */
export const JUDGED_RATIOS: readonly JudgedRatio[] = [
  pair('replay CPU/req ≤ 1.5× replay floor', 'replay', 'replay-floor', 'cpu', 1.5, true),
  pair('replay req/s ≥ 2.5× our pass-through', 'replay', 'passthrough', 'rps', 2.5, false),
  pair('new key proxy CPU/req ≤ 1.6× our pass-through', 'new-key', 'passthrough', 'cpu', 1.6, true),
  pair('pass-through CPU/req ≤ 1.15× bare undici', 'passthrough', 'bare-undici', 'cpu', 1.15, true),
  pair('pass-through req/s ≥ 1.3× bare http-proxy', 'passthrough', 'bare', 'rps', 1.3, false),
];

function pair(
  target: string,
  numerator: ScenarioName,
  denominator: ScenarioName,
  of: 'cpu' | 'rps',
  limit: number,
  atMost: boolean,
): JudgedRatio {
  return { target, numerator, denominator, of, limit, atMost };
}

/** The ratio of `p` between two scenarios' results; undefined when either was not measured. */
export function ratioOf(
  p: JudgedRatio,
  numerator: ScenarioResult | undefined,
  denominator: ScenarioResult | undefined,
): number | undefined {
  const read = (s: ScenarioResult | undefined): number | undefined =>
    p.of === 'cpu' ? s?.cpuMicrosPerRequest?.proxy : s?.requestsPerS;
  return quotient(read(numerator), read(denominator));
}

/** top ÷ bottom; undefined when either is missing or bottom is 0. */
export function quotient(top: number | undefined, bottom: number | undefined): number | undefined {
  return top === undefined || bottom === undefined || bottom === 0 ? undefined : top / bottom;
}
