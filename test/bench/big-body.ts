// The big-body scenario (issue 12): how long an unrelated pass-through request waits while 20
// concurrent repeats of a 1 MB JSON body hammer one key. A repeat whose bytes the proxy has seen is
// answered from a SHA-256 of its bytes; canonicalising 1 MB of JSON on the event loop for every one
// of them made an unrelated GET wait seconds. Target: p99 under 50 ms.
import { performance } from 'node:perf_hooks';
import { Agent, request } from 'undici';
import type { Endpoints } from './scenarios';

const REPEATERS = 20;
const WINDOW_MS = 5_000;
const PROBE_EVERY_MS = 10;
export const BIG_BODY_TARGET_P99_MS = 50;

export interface BigBodyResult {
  readonly bodyBytes: number;
  readonly repeats: number;
  readonly repeatStatuses: Record<string, number>;
  readonly idle: Latency;
  readonly underLoad: Latency;
}

interface Latency {
  readonly probes: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly maxMs: number;
}

/** ~1,000,000 bytes of JSON numbers: under the default 1mb maxRequestBytes. */
function bigBody(): string {
  const numbers: number[] = [];
  let length = 2;
  for (let i = 0; length < 1_000_000; i++) {
    const value = (i * 7919) % 1_000_003;
    numbers.push(value);
    length += String(value).length + 1;
  }
  return JSON.stringify(numbers);
}

export async function measureBigBody(endpoints: Endpoints): Promise<BigBodyResult> {
  const agent = new Agent({ connections: REPEATERS + 2 });
  const body = bigBody();
  const key = `big-body-${Date.now()}`;
  const post = async (): Promise<number> => {
    const response = await request(`${endpoints.proxy}/refunds`, {
      method: 'POST',
      dispatcher: agent,
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body,
    });
    await response.body.dump();
    return response.statusCode;
  };
  try {
    // The first request executes; the first repeat reads the record and admits it to the cache.
    for (const expected of [201, 201]) {
      const status = await post();
      if (status !== expected)
        throw new Error(`big body setup: got ${status}, expected ${expected}`);
    }
    const idle = await probe(endpoints, agent, 1_000);
    const statuses: Record<string, number> = {};
    let repeats = 0;
    let running = true;
    const repeaters = Array.from({ length: REPEATERS }, async () => {
      while (running) {
        const status = await post();
        statuses[status] = (statuses[status] ?? 0) + 1;
        repeats++;
      }
    });
    const underLoad = await probe(endpoints, agent, WINDOW_MS);
    running = false;
    await Promise.all(repeaters);
    return {
      bodyBytes: Buffer.byteLength(body),
      repeats,
      repeatStatuses: statuses,
      idle,
      underLoad,
    };
  } finally {
    await agent.close();
  }
}

/** One pass-through GET at a time, every PROBE_EVERY_MS, for `windowMs`. */
async function probe(endpoints: Endpoints, agent: Agent, windowMs: number): Promise<Latency> {
  const times: number[] = [];
  const end = performance.now() + windowMs;
  while (performance.now() < end) {
    const started = performance.now();
    const response = await request(`${endpoints.proxy}/pass/probe`, { dispatcher: agent });
    await response.body.dump();
    times.push(performance.now() - started);
    await new Promise((resolve) => setTimeout(resolve, PROBE_EVERY_MS));
  }
  times.sort((a, b) => a - b);
  const at = (p: number): number =>
    times[Math.min(times.length - 1, Math.floor(p * times.length))]!;
  return { probes: times.length, p50Ms: at(0.5), p99Ms: at(0.99), maxMs: times[times.length - 1]! };
}

export function formatBigBody(result: BigBodyResult): string {
  const ms = (value: number): string => value.toFixed(1);
  const verdict = result.underLoad.p99Ms < BIG_BODY_TARGET_P99_MS ? 'PASS' : 'FAIL';
  return [
    `Big bodies: an unrelated pass-through GET while ${REPEATERS} concurrent repeats of a ${(result.bodyBytes / 1e6).toFixed(2)} MB JSON body run (${result.repeats} repeats in ${WINDOW_MS / 1000} s, statuses ${JSON.stringify(result.repeatStatuses)})`,
    `  idle:       p50 ${ms(result.idle.p50Ms)} ms, p99 ${ms(result.idle.p99Ms)} ms, max ${ms(result.idle.maxMs)} ms (${result.idle.probes} probes)`,
    `  under load: p50 ${ms(result.underLoad.p50Ms)} ms, p99 ${ms(result.underLoad.p99Ms)} ms, max ${ms(result.underLoad.maxMs)} ms (${result.underLoad.probes} probes)`,
    `  ${verdict} p99 under load < ${BIG_BODY_TARGET_P99_MS} ms`,
  ].join('\n');
}
