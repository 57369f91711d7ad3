// The load generator, as its own process on its own core (run-bench spawns it under `taskset -c 0`):
// autocannon's programmatic API, one run per {type:'run'} message, answered with {type:'result'}.
// Kept alive between runs so a scenario never pays for a Node start-up.
import autocannon from 'autocannon';

export interface LoadSpec {
  readonly url: string;
  readonly method: 'GET' | 'POST';
  readonly headers: Record<string, string>;
  readonly body: string;
  readonly connections: number;
  readonly durationS: number;
  /** Replace `[<id>]` in the request (e.g. in the Idempotency-Key header) with a fresh id each time. */
  readonly uniqueIds: boolean;
}

export interface LoadRunMessage {
  readonly type: 'run';
  readonly id: number;
  readonly spec: LoadSpec;
}

export interface LoadSummary {
  /** Responses received (any status). */
  readonly completed: number;
  readonly sent: number;
  readonly durationS: number;
  readonly latencyMs: {
    readonly p50: number;
    readonly p90: number;
    readonly p99: number;
    readonly max: number;
    readonly mean: number;
  };
  readonly non2xx: number;
  readonly errors: number;
  readonly timeouts: number;
  readonly statusCodes: Record<string, number>;
}

export interface LoadResultMessage {
  readonly type: 'result';
  readonly id: number;
  readonly summary?: LoadSummary;
  readonly error?: string;
}

async function run(spec: LoadSpec): Promise<LoadSummary> {
  const result = await autocannon({
    url: spec.url,
    method: spec.method,
    headers: spec.headers,
    body: spec.body.length > 0 ? spec.body : undefined,
    connections: spec.connections,
    duration: spec.durationS,
    idReplacement: spec.uniqueIds,
    timeout: 30,
  });
  const statusCodes: Record<string, number> = {};
  for (const [code, stats] of Object.entries(result.statusCodeStats ?? {})) {
    statusCodes[code] = (stats as { count?: number }).count ?? 0;
  }
  return {
    completed: result.requests.total,
    sent: (result.requests as { sent?: number }).sent ?? result.requests.total,
    durationS: result.duration,
    latencyMs: {
      p50: result.latency.p50,
      p90: result.latency.p90,
      p99: result.latency.p99,
      max: result.latency.max,
      mean: result.latency.average,
    },
    non2xx: result.non2xx,
    errors: result.errors,
    timeouts: result.timeouts,
    statusCodes,
  };
}

process.on('message', (message: LoadRunMessage) => {
  if (message?.type !== 'run') return;
  run(message.spec).then(
    (summary) => process.send?.({ type: 'result', id: message.id, summary }),
    (error: unknown) => process.send?.({ type: 'result', id: message.id, error: String(error) }),
  );
});
process.on('disconnect', () => process.exit(0));
process.on('SIGTERM', () => process.exit(0));
process.send?.({ type: 'ready' });
