// The streams measurement: an event stream of 20 events 20 ms apart, asked for directly from the
// upstream and through the proxy (a protected route, a new key each time), one request at a time.
// Printed: the time to the first body byte, and each event's delay from the moment the upstream
// sent it (stamped in the event: performance.timeOrigin + now, one clock on one machine) to its
// arrival; the proxy's added latency per chunk is the difference of the two medians. Then a repeat
// of a running stream's key, on a proxy with onConcurrent: attach (its own route, when the build
// has it): how long until it holds what was sent so far, and its live events' delay.
import http from 'node:http';
import type { Endpoints } from './scenarios';

const EVENTS = 20;
const EVERY_MS = 20;
const ROUNDS = 30;

export interface StreamLatency {
  readonly rounds: number;
  readonly firstByteMs: Quantiles;
  readonly chunkDelayMs: Quantiles;
}

export interface StreamsResult {
  readonly events: number;
  readonly everyMs: number;
  readonly direct: StreamLatency;
  readonly proxy: StreamLatency;
  /** Median chunk delay through the proxy minus directly. */
  readonly addedPerChunkMs: number;
  readonly addedFirstByteMs: number;
  readonly attach: AttachLatency | { readonly skipped: string };
}

export interface AttachLatency {
  readonly rounds: number;
  /** From the repeat's request to holding every event sent so far. */
  readonly catchUpMs: Quantiles;
  /** Delay of the events the repeat got live. */
  readonly liveChunkDelayMs: Quantiles;
}

interface Quantiles {
  readonly p50: number;
  readonly p99: number;
}

interface Arrival {
  readonly startedAt: number;
  firstByteAt: number;
  readonly delays: number[];
  /** Arrival times (performance.now()) of each event. */
  readonly arrivals: number[];
  readonly done: Promise<void>;
}

const now = (): number => performance.timeOrigin + performance.now();

/** POSTs and reads the event stream, timing each event as it comes. */
function streamFrom(base: string, path: string, key: string | undefined): Arrival {
  const startedAt = performance.now();
  const arrival: Omit<Arrival, 'done'> & { done?: Promise<void> } = {
    startedAt,
    firstByteAt: NaN,
    delays: [],
    arrivals: [],
  };
  arrival.done = new Promise<void>((resolve, reject) => {
    const headers: http.OutgoingHttpHeaders = { 'content-length': 0 };
    if (key !== undefined) headers['idempotency-key'] = key;
    const req = http.request(`${base}${path}`, { method: 'POST', headers, agent: false });
    req.on('response', (res) => {
      let pending = '';
      res.setEncoding('utf8');
      res.on('data', (text: string) => {
        if (Number.isNaN(arrival.firstByteAt)) arrival.firstByteAt = performance.now();
        pending += text;
        let end: number;
        while ((end = pending.indexOf('\n\n')) !== -1) {
          const event = pending.slice(0, end);
          pending = pending.slice(end + 2);
          const data = /^data: (.*)$/m.exec(event)?.[1];
          if (data === undefined) continue;
          arrival.delays.push(now() - (JSON.parse(data) as { sentAt: number }).sentAt);
          arrival.arrivals.push(performance.now());
        }
      });
      res.on('end', () => resolve());
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
  return arrival as Arrival;
}

function quantiles(values: number[]): Quantiles {
  const sorted = [...values].sort((a, b) => a - b);
  const at = (q: number): number =>
    round(sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN);
  return { p50: at(0.5), p99: at(0.99) };
}

const round = (ms: number): number => Math.round(ms * 1000) / 1000;

async function rounds(base: string, keyed: boolean): Promise<StreamLatency> {
  const firstBytes: number[] = [];
  const delays: number[] = [];
  const path = `/stream?events=${EVENTS}&every=${EVERY_MS}`;
  for (let round = 0; round < ROUNDS; round++) {
    const key = keyed ? `stream-${Date.now()}-${round}` : undefined;
    const arrival = streamFrom(base, path, key);
    await arrival.done;
    firstBytes.push(arrival.firstByteAt - arrival.startedAt);
    delays.push(...arrival.delays);
  }
  return { rounds: ROUNDS, firstByteMs: quantiles(firstBytes), chunkDelayMs: quantiles(delays) };
}

/** Repeats of a running stream's key, joined at its 5th event (onConcurrent: attach). */
async function attachRounds(base: string, path: string): Promise<AttachLatency> {
  const catchUps: number[] = [];
  const live: number[] = [];
  const JOIN_AT = 5;
  for (let round = 0; round < ROUNDS; round++) {
    const key = `attach-${Date.now()}-${round}`;
    const first = streamFrom(base, path, key);
    while (first.arrivals.length < JOIN_AT) await new Promise((resolve) => setTimeout(resolve, 1));
    const joinedWith = first.arrivals.length;
    const repeat = streamFrom(base, path, key);
    await Promise.all([first.done, repeat.done]);
    if (repeat.arrivals.length !== EVENTS) throw new Error('an attached repeat missed events');
    catchUps.push(repeat.arrivals[joinedWith - 1]! - repeat.startedAt);
    live.push(...repeat.delays.slice(joinedWith + 1));
  }
  return { rounds: ROUNDS, catchUpMs: quantiles(catchUps), liveChunkDelayMs: quantiles(live) };
}

export async function measureStreams(
  endpoints: Endpoints,
  attachPath: string | undefined,
): Promise<StreamsResult> {
  // One warm-up each: connections, JIT.
  await rounds(endpoints.upstream, false);
  await rounds(endpoints.proxy, true);
  const direct = await rounds(endpoints.upstream, false);
  const proxy = await rounds(endpoints.proxy, true);
  let attach: StreamsResult['attach'] = { skipped: 'the build has no onConcurrent: attach' };
  if (attachPath !== undefined) {
    try {
      attach = await attachRounds(
        endpoints.proxy,
        `${attachPath}?events=${EVENTS}&every=${EVERY_MS}`,
      );
    } catch (error) {
      attach = { skipped: error instanceof Error ? error.message : String(error) };
    }
  }
  return {
    events: EVENTS,
    everyMs: EVERY_MS,
    direct,
    proxy,
    addedPerChunkMs: round(proxy.chunkDelayMs.p50 - direct.chunkDelayMs.p50),
    addedFirstByteMs: round(proxy.firstByteMs.p50 - direct.firstByteMs.p50),
    attach,
  };
}

export function formatStreams(result: StreamsResult): string {
  const { direct, proxy } = result;
  const lines = [
    `Streams: ${result.events} events ${result.everyMs} ms apart, ${direct.rounds} requests each, one at a time`,
    `                          first byte p50 / p99      chunk delay p50 / p99`,
    `  upstream directly       ${pair(direct.firstByteMs)}      ${pair(direct.chunkDelayMs)}`,
    `  through the proxy       ${pair(proxy.firstByteMs)}      ${pair(proxy.chunkDelayMs)}`,
    `  the proxy adds          ${result.addedFirstByteMs.toFixed(2)} ms to the first byte, ${result.addedPerChunkMs.toFixed(2)} ms per chunk (p50)`,
  ];
  const attach = result.attach;
  if ('skipped' in attach) lines.push(`  attach: skipped (${attach.skipped})`);
  else
    lines.push(
      `  attach (joined at event 5): caught up in ${pair(attach.catchUpMs).trim()}, live chunks ${pair(attach.liveChunkDelayMs).trim()}`,
    );
  return lines.join('\n');
}

function pair(q: Quantiles): string {
  return `${q.p50.toFixed(2)} / ${q.p99.toFixed(2)} ms`.padEnd(19);
}
