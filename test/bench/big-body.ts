// The big-body scenario: how long an unrelated pass-through request waits while 20
// concurrent repeats of a 1 MB JSON body hammer one key. A repeat whose bytes the proxy has seen is
// answered from a SHA-256 of its bytes; canonicalising 1 MB of JSON on the event loop for every one
// of them made an unrelated GET wait seconds. Target: p99 under 50 ms.
//
// The repeats come from a child process of their own (this file, run as a script), so the probe
// measures the proxy's delay, not that of a load generator busy writing 1 MB bodies in its process.
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { Agent, request } from 'undici';
import { spawnPinned, waitForMessage } from './children';
import { readMemory, type RssSampler } from './proc-stats';
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
  /**
   * The proxy's own event-loop delay over the loaded window (prom-client's monitorEventLoopDelay
   * gauges, which reset at every scrape), in ms; undefined when its metrics could not be read.
   */
  readonly eventLoopDelay: { readonly p99Ms: number; readonly maxMs: number } | undefined;
  /**
   * The proxy's resident memory (VmRSS, bytes) just before the repeats start and its peak while
   * they run (sampled every 100 ms); undefined where /proc cannot be read.
   */
  readonly rss: { readonly beforeBytes: number; readonly peakBytes: number } | undefined;
}

/** Where the proxy's memory is read: its pid, and the bench's sampler that watches it. */
export interface WatchedProxy {
  readonly pid: number;
  readonly sampler: RssSampler;
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

export async function measureBigBody(
  endpoints: Endpoints,
  adminUrl: string,
  loadCore: number | undefined,
  proxy: WatchedProxy | undefined,
): Promise<BigBodyResult> {
  const agent = new Agent({ connections: 2 });
  const key = `big-body-${Date.now()}`;
  const repeater = spawnPinned(
    'big-body repeats',
    process.execPath,
    [__filename, endpoints.proxy, key],
    {
      core: loadCore,
      ipc: true,
    },
  );
  try {
    // The first request executes; the first repeat reads the record and admits it to the cache.
    const ready = await waitForMessage<{ type: string; bodyBytes: number }>(
      repeater,
      'ready',
      60_000,
    );
    const idle = await probe(endpoints, agent, 1_000);
    await eventLoopDelay(adminUrl); // a scrape resets the gauges: the next one covers the window
    const before = proxy && readMemory(proxy.pid)?.rssBytes;
    proxy?.sampler.takeWindow(); // the next window is the repeats'
    repeater.process.send({ type: 'start' });
    const underLoad = await probe(endpoints, agent, WINDOW_MS);
    const peak = proxy?.sampler.takeWindow().get(proxy.pid);
    const delay = await eventLoopDelay(adminUrl);
    repeater.process.send({ type: 'stop' });
    const done = await waitForMessage<{
      type: string;
      repeats: number;
      statuses: Record<string, number>;
    }>(repeater, 'done', 60_000);
    return {
      bodyBytes: ready.bodyBytes,
      repeats: done.repeats,
      repeatStatuses: done.statuses,
      idle,
      underLoad,
      eventLoopDelay: delay,
      rss:
        before === undefined || peak === undefined
          ? undefined
          : { beforeBytes: before, peakBytes: peak },
    };
  } finally {
    await repeater.stop();
    await agent.close();
  }
}

/** The proxy's event-loop delay p99 and max since the last scrape, from its /metrics. */
async function eventLoopDelay(
  adminUrl: string,
): Promise<{ p99Ms: number; maxMs: number } | undefined> {
  try {
    const response = await request(`${adminUrl}/metrics`);
    const text = await response.body.text();
    const gauge = (name: string): number => {
      const line = text.split('\n').find((l) => l.startsWith(`idempotency_proxy_${name} `));
      return line ? Number(line.split(' ')[1]) * 1_000 : Number.NaN;
    };
    const p99Ms = gauge('nodejs_eventloop_lag_p99_seconds');
    const maxMs = gauge('nodejs_eventloop_lag_max_seconds');
    return Number.isFinite(p99Ms) ? { p99Ms, maxMs } : undefined;
  } catch {
    return undefined;
  }
}

/** The child: POSTs the big body with one key from REPEATERS loops between "start" and "stop". */
async function runRepeater(proxyUrl: string, key: string): Promise<void> {
  // The repeats share the load core with the probe's client, and keep it busy sending 250+ MB/s:
  // at nice 10 they give way whenever the probe wakes, so its latency is the proxy's, not the time
  // its own client waited for a CPU. The proxy gets the same repeats either way (a closed loop).
  os.setPriority(10);
  const agent = new Agent({ connections: REPEATERS });
  // Encoded once: a string body would be UTF-8 encoded again for every POST, on the core the probe
  // shares.
  const body = Buffer.from(bigBody());
  const post = async (): Promise<number> => {
    const response = await request(`${proxyUrl}/refunds`, {
      method: 'POST',
      dispatcher: agent,
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body,
    });
    await response.body.dump();
    return response.statusCode;
  };
  for (const expected of [201, 201]) {
    const status = await post();
    if (status !== expected) throw new Error(`big body setup: got ${status}, expected ${expected}`);
  }
  process.send!({ type: 'ready', bodyBytes: Buffer.byteLength(body) });
  await nextMessage('start');
  let running = true;
  let repeats = 0;
  const statuses: Record<string, number> = {};
  const loops = Array.from({ length: REPEATERS }, async () => {
    while (running) {
      const status = await post();
      statuses[status] = (statuses[status] ?? 0) + 1;
      repeats++;
    }
  });
  await nextMessage('stop');
  running = false;
  await Promise.all(loops);
  process.send!({ type: 'done', repeats, statuses });
}

function nextMessage(type: string): Promise<void> {
  return new Promise((resolve) => {
    const onMessage = (message: { type?: string }): void => {
      if (message?.type !== type) return;
      process.off('message', onMessage);
      resolve();
    };
    process.on('message', onMessage);
  });
}

if (require.main === module) {
  const [proxyUrl, key] = process.argv.slice(2);
  runRepeater(proxyUrl!, key!).catch((error: unknown) => {
    process.send?.({
      type: 'error',
      error: error instanceof Error ? error.message : String(error),
    });
  });
  process.on('SIGTERM', () => process.exit(0));
  process.on('disconnect', () => process.exit(0));
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
  const mb = (bytes: number): string => (bytes / 1024 / 1024).toFixed(1);
  const verdict = result.underLoad.p99Ms < BIG_BODY_TARGET_P99_MS ? 'met' : 'not met';
  return [
    `Big bodies: an unrelated pass-through GET while ${REPEATERS} concurrent repeats of a ${(result.bodyBytes / 1e6).toFixed(2)} MB JSON body run (${result.repeats} repeats in ${WINDOW_MS / 1000} s, statuses ${JSON.stringify(result.repeatStatuses)})`,
    `  idle:       p50 ${ms(result.idle.p50Ms)} ms, p99 ${ms(result.idle.p99Ms)} ms, max ${ms(result.idle.maxMs)} ms (${result.idle.probes} probes)`,
    `  under load: p50 ${ms(result.underLoad.p50Ms)} ms, p99 ${ms(result.underLoad.p99Ms)} ms, max ${ms(result.underLoad.maxMs)} ms (${result.underLoad.probes} probes)`,
    result.eventLoopDelay
      ? `  the proxy's event-loop delay under load: p99 ${ms(result.eventLoopDelay.p99Ms)} ms, max ${ms(result.eventLoopDelay.maxMs)} ms`
      : `  the proxy's event-loop delay: not read (its /metrics did not answer)`,
    result.rss
      ? `  the proxy's RSS: ${mb(result.rss.beforeBytes)} MB before the repeats, peak ${mb(result.rss.peakBytes)} MB while they ran`
      : `  the proxy's RSS: not read`,
    `  target p99 under load < ${BIG_BODY_TARGET_P99_MS} ms: ${verdict}`,
  ].join('\n');
}
