// /metrics and the console's counters of a cluster, served by the primary's admin listener: each
// worker's registry, as JSON, and the primary's own (the pruner, the embedded PostgreSQL's restarts,
// its process) aggregated by prom-client's AggregatorRegistry — counters and histograms summed per
// label set, so `requests_total` is the cluster's. The primary asks over its own questions rather
// than AggregatorRegistry.clusterMetrics(), which gathers the workers only.
import { AggregatorRegistry } from 'prom-client';
import type { AdminMetrics } from '../admin/admin-deps';
import type { ProxyMetrics } from '../metrics';
import type { OutcomeCounters } from '../observability/outcome-ring';
import type { Answer } from './questions';
import type { Question } from './messages';

/** A scrape waits this long for a busy worker; one that does not answer is left out of it. */
export const SCRAPE_TIMEOUT_MS = 3_000;

export function clusterMetrics(
  own: ProxyMetrics,
  ask: (question: Question, timeoutMs: number) => Promise<Answer[]>,
): AdminMetrics {
  const answered = async <T>(what: 'metrics' | 'outcomes'): Promise<T[]> =>
    (await ask({ what }, SCRAPE_TIMEOUT_MS)).flatMap((answer) =>
      answer.error === undefined ? [answer.value as T] : [],
    );
  return {
    registry: {
      contentType: own.registry.contentType,
      async metrics() {
        const workers = await answered<object[]>('metrics');
        const all = [await own.registry.getMetricsAsJSON(), ...workers];
        return AggregatorRegistry.aggregate(all).metrics();
      },
    },
    recentOutcomes: {
      async snapshot() {
        const workers = await answered<OutcomeCounters>('outcomes');
        return mergeOutcomeCounters([own.recentOutcomes.snapshot(), ...workers]);
      },
    },
  };
}

/** Several processes' counters as one: bucket by bucket (by start time), the newest BUCKET_COUNT. */
export function mergeOutcomeCounters(all: readonly OutcomeCounters[]): OutcomeCounters {
  const byStart = new Map<string, Record<string, number>>();
  let longest = 0;
  for (const counters of all) {
    longest = Math.max(longest, counters.buckets.length);
    for (const bucket of counters.buckets) {
      const counts = byStart.get(bucket.start) ?? {};
      byStart.set(bucket.start, counts);
      for (const [outcome, count] of Object.entries(bucket.counts)) {
        counts[outcome] = (counts[outcome] ?? 0) + count;
      }
    }
  }
  // Snapshots taken either side of a bucket's end differ by one bucket: keep the newest.
  const buckets = [...byStart.entries()]
    .sort(([a], [b]) => a.localeCompare(b))
    .slice(-longest)
    .map(([start, counts]) => ({ start, counts }));
  const totals: Record<string, number> = {};
  for (const { counts } of buckets)
    for (const [outcome, count] of Object.entries(counts))
      totals[outcome] = (totals[outcome] ?? 0) + count;
  return { bucketSeconds: all[0]?.bucketSeconds ?? 10, buckets, totals };
}
