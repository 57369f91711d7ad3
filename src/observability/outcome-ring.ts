// The console's live counters: requests answered per outcome in 10-second buckets over the last 15
// minutes, in this process only. A ring of fixed slots, so memory stays constant; outcomes are the
// log's bounded set (never a key or a tenant). Prometheus keeps the long history; this is what a
// person watching the console needs without a Prometheus.
//
//   slot = floor(nowMs / bucketMs) % bucketCount; a slot whose bucket number is stale is reset
//   before it counts again, so a quiet period reads as zeros, not as old counts.

export interface OutcomeBucket {
  /** Start of the bucket (ISO 8601). */
  readonly start: string;
  readonly counts: Readonly<Record<string, number>>;
}

export interface OutcomeCounters {
  readonly bucketSeconds: number;
  /** Oldest first; the last one is the bucket now filling. */
  readonly buckets: readonly OutcomeBucket[];
  /** Sums over all buckets, by outcome. */
  readonly totals: Readonly<Record<string, number>>;
}

export const BUCKET_MS = 10_000;
export const BUCKET_COUNT = 90;

export class OutcomeRing {
  private readonly bucketOf: number[];
  private readonly counts: Map<string, number>[];

  constructor(
    private readonly bucketMs = BUCKET_MS,
    private readonly bucketCount = BUCKET_COUNT,
    private readonly nowMs: () => number = Date.now,
  ) {
    this.bucketOf = new Array<number>(bucketCount).fill(-1);
    this.counts = Array.from({ length: bucketCount }, () => new Map<string, number>());
  }

  add(outcome: string): void {
    const bucket = Math.floor(this.nowMs() / this.bucketMs);
    const slot = bucket % this.bucketCount;
    const counts = this.counts[slot]!;
    if (this.bucketOf[slot] !== bucket) {
      this.bucketOf[slot] = bucket;
      counts.clear();
    }
    counts.set(outcome, (counts.get(outcome) ?? 0) + 1);
  }

  snapshot(): OutcomeCounters {
    const current = Math.floor(this.nowMs() / this.bucketMs);
    const buckets: OutcomeBucket[] = [];
    const totals: Record<string, number> = {};
    for (let bucket = current - this.bucketCount + 1; bucket <= current; bucket++) {
      const slot = bucket % this.bucketCount;
      const counts: Record<string, number> = {};
      if (this.bucketOf[slot] === bucket) {
        for (const [outcome, count] of this.counts[slot]!) {
          counts[outcome] = count;
          totals[outcome] = (totals[outcome] ?? 0) + count;
        }
      }
      buckets.push({ start: new Date(bucket * this.bucketMs).toISOString(), counts });
    }
    return { bucketSeconds: this.bucketMs / 1000, buckets, totals };
  }
}
