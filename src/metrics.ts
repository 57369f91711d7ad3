// Prometheus metrics (prom-client). Labels are bounded sets only — route names, outcomes, store
// operations, status classes — never a key or a tenant, which would explode cardinality and leak data.
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';
import type { RequestLogEntry } from './http/request-log';
import type { ProtectedObserver } from './protected/protocol';
import type { ProbeResult } from './reconcile/reconciler';
import type { WriteKind } from './store/postgres/pending-writes';
import type { Settlement } from './store/postgres/write-outbox';
import { OutcomeRing } from './observability/outcome-ring';

const PREFIX = 'idempotency_proxy_';
const MAX_TOOL_LABELS = 100;
const OTHER_TOOL = '(other)';
const LATENCY_BUCKETS = [
  0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
];

export class ProxyMetrics implements ProtectedObserver {
  readonly registry = new Registry();
  private readonly requests: Counter<'route' | 'outcome' | 'status_class'>;
  private readonly replays: Counter<'route'>;
  private readonly cacheHits: Counter<'route'>;
  private readonly unknownOutcomes: Counter<'route'>;
  private readonly shadow: Counter<'route' | 'would'>;
  private readonly upstreamSeconds: Histogram<'route'>;
  private readonly firstByteSeconds: Histogram<'route'>;
  private readonly storeSeconds: Histogram<'operation'>;
  private readonly storeErrors: Counter<'operation'>;
  private readonly inFlightClaims: Gauge;
  private readonly pruned: Counter;
  private readonly reconcileProbes: Counter<'route' | 'result'>;
  private readonly embeddedRestarts: Counter;
  private readonly writeRetries: Counter<'operation'>;
  private readonly writesLanded: Counter<'operation'>;
  private readonly writesDropped: Counter<'operation' | 'reason'>;
  private readonly backgroundReleases: Counter<'result'>;
  private readonly unknownReplaced: Counter;
  private readonly heapCollections: Counter;
  private readonly heapCollectionSeconds: Counter;
  private readonly spoolRefusals: Counter;
  /** What the store's outbox holds now (key-store.ts pendingWrites), read when scraped. */
  private pendingWrites: () => { readonly writes: number; readonly bytes: number } = () => ({
    writes: 0,
    bytes: 0,
  });
  private readonly waitingRequests: Gauge;
  private requestBodies: () => number = () => 0;
  private readonly toolCalls: Counter<'route' | 'tool' | 'outcome'>;
  /** Tool names seen as labels; past MAX_TOOL_LABELS they count as OTHER_TOOL. */
  private readonly toolLabels = new Set<string>();
  /** Requests per outcome in 10 s buckets over 15 minutes, for the admin console's chart. */
  readonly recentOutcomes = new OutcomeRing();

  constructor(options: { defaultMetrics?: boolean } = {}) {
    const registers = [this.registry];
    if (options.defaultMetrics !== false) {
      collectDefaultMetrics({ register: this.registry, prefix: PREFIX });
      // prom-client reads the heap and the external memory; the buffers inside the latter (socket
      // reads, bodies, stored answers) are what a memory plan most needs apart.
      new Gauge({
        name: `${PREFIX}nodejs_array_buffers_bytes`,
        help: 'Memory of ArrayBuffers and Buffers (request and answer bodies, socket data): part of nodejs_external_memory_bytes.',
        registers,
        collect() {
          this.set(process.memoryUsage().arrayBuffers);
        },
      });
    }
    this.requests = new Counter({
      name: `${PREFIX}requests_total`,
      help: 'Requests answered, by route, outcome (executed, replayed, in_flight, mismatch, ...) and status class.',
      labelNames: ['route', 'outcome', 'status_class'],
      registers,
      collect: () => handOver(this.everyRequestTally()),
    });
    this.replays = new Counter({
      name: `${PREFIX}replays_total`,
      help: 'Requests answered from a stored response.',
      labelNames: ['route'],
      registers,
      collect: () => handOver(this.replayTallies.values()),
    });
    this.cacheHits = new Counter({
      name: `${PREFIX}replay_cache_hits_total`,
      help: 'Repeats answered from the in-process replay cache, without a store round trip.',
      labelNames: ['route'],
      registers,
      collect: () => handOver(this.cacheHitTallies.values()),
    });
    this.unknownOutcomes = new Counter({
      name: `${PREFIX}unknown_outcomes_total`,
      help: 'Answers marked Idempotency-Outcome: unknown (the upstream may or may not have acted).',
      labelNames: ['route'],
      registers,
    });
    this.shadow = new Counter({
      name: `${PREFIX}shadow_decisions_total`,
      help: 'Shadow mode (enforce: false): what enforcement would have done instead of forwarding.',
      labelNames: ['route', 'would'],
      registers,
    });
    this.upstreamSeconds = new Histogram({
      name: `${PREFIX}upstream_duration_seconds`,
      help: 'Time spent on upstream calls of protected requests.',
      labelNames: ['route'],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.firstByteSeconds = new Histogram({
      name: `${PREFIX}stream_first_byte_seconds`,
      help: 'Streamed answers of protected requests: time from the request to its first body byte sent on.',
      labelNames: ['route'],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.storeSeconds = new Histogram({
      name: `${PREFIX}store_duration_seconds`,
      help: 'Latency of idempotency store round trips, by operation (claim, complete, release, ...).',
      labelNames: ['operation'],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.storeErrors = new Counter({
      name: `${PREFIX}store_errors_total`,
      help: 'Failed idempotency store operations.',
      labelNames: ['operation'],
      registers,
    });
    this.inFlightClaims = new Gauge({
      name: `${PREFIX}in_flight_claims`,
      help: 'Claims this instance holds right now (forwarding, not yet stored or released).',
      registers,
    });
    this.waitingRequests = new Gauge({
      name: `${PREFIX}waiting_requests`,
      help: 'Requests waiting for an in-flight duplicate (onConcurrent: wait).',
      registers,
    });
    this.toolCalls = new Counter({
      name: `${PREFIX}mcp_tool_calls_total`,
      help: `Protected MCP tools/call requests, by route, tool (the first ${MAX_TOOL_LABELS} names seen; later ones as "${OTHER_TOOL}") and outcome.`,
      labelNames: ['route', 'tool', 'outcome'],
      registers,
    });
    this.reconcileProbes = new Counter({
      name: `${PREFIX}reconcile_probes_total`,
      help: 'Probes asking an upstream about an unknown outcome, by route and result (found, not_found, inconclusive, failed); gave_up counts records given up past giveUpAfter, once each.',
      labelNames: ['route', 'result'],
      registers,
    });
    this.pruned = new Counter({
      name: `${PREFIX}pruned_rows_total`,
      help: 'Expired records deleted by this instance.',
      registers,
    });
    this.embeddedRestarts = new Counter({
      name: `${PREFIX}embedded_postgres_restarts_total`,
      help: 'Times the embedded PostgreSQL exited on its own and was started again (0 with a store URL).',
      registers,
    });
    const pending = (): { readonly writes: number; readonly bytes: number } => this.pendingWrites();
    new Gauge({
      name: `${PREFIX}store_pending_writes`,
      help: 'Completions and releases whose statement failed, kept in memory and sent again until they land.',
      registers,
      collect() {
        this.set(pending().writes);
      },
    });
    new Gauge({
      name: `${PREFIX}store_pending_write_bytes`,
      help: 'Memory held by the pending writes (answers’ bodies and headers).',
      registers,
      collect() {
        this.set(pending().bytes);
      },
    });
    const bodies = (): number => this.requestBodies();
    new Gauge({
      name: `${PREFIX}request_body_bytes_in_flight`,
      help: 'Bytes reserved for the request bodies protected routes hold now (bounded by listen.maxBodyBytesInFlight).',
      registers,
      collect() {
        this.set(bodies());
      },
    });
    this.writeRetries = new Counter({
      name: `${PREFIX}store_write_retries_total`,
      help: 'Completions and releases sent again after a failed statement, by operation (complete, release, release_claim).',
      labelNames: ['operation'],
      registers,
    });
    this.writesLanded = new Counter({
      name: `${PREFIX}store_writes_landed_after_retry_total`,
      help: 'Completions and releases stored by a retry after their first statement failed.',
      labelNames: ['operation'],
      registers,
    });
    this.writesDropped = new Counter({
      name: `${PREFIX}store_writes_dropped_total`,
      help: 'Pending completions and releases given up, by operation and reason (bound, taken_over, expired, failed, shutdown).',
      labelNames: ['operation', 'reason'],
      registers,
    });
    this.backgroundReleases = new Counter({
      name: `${PREFIX}store_background_releases_total`,
      help: 'Claims whose reply was lost, released by their token in the background: released, not_claimed (the claim had not committed), dropped.',
      labelNames: ['result'],
      registers,
    });
    this.spoolRefusals = new Counter({
      name: `${PREFIX}spool_refused_total`,
      help: 'Answers the spool could not take (full, or its disk failed): each waited until PostgreSQL had it.',
      registers,
    });
    this.heapCollections = new Counter({
      name: `${PREFIX}heap_collections_total`,
      help: 'Full garbage collections this process ran because its heap passed heapTarget.',
      registers,
    });
    this.heapCollectionSeconds = new Counter({
      name: `${PREFIX}heap_collection_seconds_total`,
      help: 'Time those collections held the event loop.',
      registers,
    });
    this.unknownReplaced = new Counter({
      name: `${PREFIX}unknown_outcomes_replaced_total`,
      help: "Unknown outcomes settled when a claim's lease ended, replaced by that claim's real answer when it landed later.",
      registers,
    });
  }

  /**
   * Per-request counts, kept as plain numbers and handed to prom-client when it is scraped
   * (`collect`): a child's inc() hashes and stores on every call, three times a request. Requests'
   * are found by route, outcome and status class (its index in STATUS_CLASSES), without building a
   * key per request.
   */
  private readonly requestTallies = new Map<string, Map<string, (Tally | undefined)[]>>();
  private readonly replayTallies = new Map<string, Tally>();
  private readonly cacheHitTallies = new Map<string, Tally>();
  private readonly upstreamChildren = new Map<string, { observe(value: number): void }>();

  /** Called once per finished request with its log entry. */
  observeRequest(entry: RequestLogEntry): void {
    const route = entry.route ?? '(none)';
    this.requestTally(route, entry.outcome, statusClass(entry.status)).count++;
    this.recentOutcomes.add(entry.outcome);
    if (entry.outcome === 'replayed') tallyOf(this.replayTallies, this.replays, route).count++;
    if (entry.cached) tallyOf(this.cacheHitTallies, this.cacheHits, route).count++;
    if (entry.outcomeUnknown) this.unknownOutcomes.inc({ route });
    if (entry.shadow) this.shadow.inc({ route, would: entry.shadow });
    if (entry.upstreamMs > 0) {
      let child = this.upstreamChildren.get(route);
      if (!child) this.upstreamChildren.set(route, (child = this.upstreamSeconds.labels(route)));
      child.observe(entry.upstreamMs / 1000);
    }
    if (entry.firstByteMs !== undefined)
      this.firstByteSeconds.observe({ route }, entry.firstByteMs / 1000);
    if (entry.tool !== undefined)
      this.toolCalls.inc({ route, tool: this.toolLabel(entry.tool), outcome: entry.outcome });
  }

  private requestTally(route: string, outcome: string, classIndex: number): Tally {
    let byOutcome = this.requestTallies.get(route);
    if (!byOutcome) this.requestTallies.set(route, (byOutcome = new Map()));
    let byClass = byOutcome.get(outcome);
    if (!byClass) byOutcome.set(outcome, (byClass = []));
    let tally = byClass[classIndex];
    if (!tally) {
      tally = new Tally(this.requests.labels(route, outcome, STATUS_CLASSES[classIndex]!));
      byClass[classIndex] = tally;
    }
    return tally;
  }

  /** Every request tally, for a scrape: a walk of the maps, so they are the one place they live. */
  private *everyRequestTally(): Iterable<Tally> {
    for (const byOutcome of this.requestTallies.values())
      for (const byClass of byOutcome.values())
        for (const tally of byClass) if (tally !== undefined) yield tally;
  }

  /**
   * Tool names come from clients: a route protecting "*" would let a client mint a label per
   * request, so only the first MAX_TOOL_LABELS distinct names get their own.
   */
  private toolLabel(tool: string): string {
    if (this.toolLabels.has(tool)) return tool;
    if (this.toolLabels.size >= MAX_TOOL_LABELS) return OTHER_TOOL;
    this.toolLabels.add(tool);
    return tool;
  }

  storeCall(operation: string, ms: number, error: unknown): void {
    if (operation === 'wait') return;
    if (error !== undefined) this.storeErrors.inc({ operation });
    else this.storeSeconds.observe({ operation }, ms / 1000);
  }

  claimsHeld(delta: 1 | -1): void {
    this.inFlightClaims.inc(delta);
  }

  waiting(count: number): void {
    this.waitingRequests.set(count);
  }

  /** One reconcile probe and what it said, or a record given up (reconcile/reconciler.ts). */
  probed(route: string, result: ProbeResult): void {
    this.reconcileProbes.inc({ route, result });
  }

  prunedRows(count: number): void {
    this.pruned.inc(count);
  }

  embeddedPostgresRestarted(): void {
    this.embeddedRestarts.inc();
  }

  storeError(operation: string): void {
    this.storeErrors.inc({ operation });
  }

  /** Where the pending-write gauges read from (the key store's outbox). */
  watchPendingWrites(read: () => { readonly writes: number; readonly bytes: number }): void {
    this.pendingWrites = read;
  }

  /** The bytes the app's body budget holds (http/body-budget.ts). */
  watchRequestBodies(read: () => number): void {
    this.requestBodies = read;
  }

  /** The spool could not take an answer (pending-writes.ts). */
  spoolRefused(): void {
    this.spoolRefusals.inc();
  }

  /** The heap passed heapTarget and was collected (heap-bound.ts). */
  heapCollected(pauseMs: number): void {
    this.heapCollections.inc();
    this.heapCollectionSeconds.inc(pauseMs / 1000);
  }

  /** A provisional unknown outcome was replaced by the real answer (key-store.ts replaceUnknown). */
  unknownOutcomeReplaced(): void {
    this.unknownReplaced.inc();
  }

  writeRetried(operation: WriteKind): void {
    this.writeRetries.inc({ operation });
  }

  /** A pending write left the outbox. */
  writeSettled(operation: WriteKind, settlement: Settlement): void {
    if (operation === 'release_claim') {
      const result =
        settlement.kind === 'landed'
          ? 'released'
          : settlement.kind === 'stale'
            ? 'not_claimed'
            : 'dropped';
      this.backgroundReleases.inc({ result });
      if (settlement.kind === 'dropped')
        this.writesDropped.inc({ operation, reason: settlement.reason });
      return;
    }
    if (settlement.kind === 'landed') this.writesLanded.inc({ operation });
    else
      this.writesDropped.inc({
        operation,
        reason: settlement.kind === 'stale' ? 'taken_over' : settlement.reason,
      });
  }
}

const STATUS_CLASSES = ['none', '1xx', '2xx', '3xx', '4xx', '5xx'];

/** The status class's index in STATUS_CLASSES. */
function statusClass(status: number): number {
  return status >= 100 && status < 600 ? Math.floor(status / 100) : 0;
}

/** Requests counted for one label-bound child since the last scrape. */
class Tally {
  count = 0;
  constructor(readonly child: { inc(value: number): void }) {}
}

function tallyOf(tallies: Map<string, Tally>, metric: Counter<'route'>, route: string): Tally {
  let tally = tallies.get(route);
  if (!tally) tallies.set(route, (tally = new Tally(metric.labels(route))));
  return tally;
}

/** Adds what was counted since the last scrape to the counters, as the scrape reads them. */
function handOver(tallies: Iterable<Tally>): void {
  for (const tally of tallies) {
    if (tally.count === 0) continue;
    tally.child.inc(tally.count);
    tally.count = 0;
  }
}
