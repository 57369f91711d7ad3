// Natural batching for store writes: at most `lanes` statements run at once, and calls that arrive
// while every lane is busy go together in the next statement. No timer and no added latency when the
// store keeps up (a lone call runs at once, alone); under load one statement — one parse, one
// executor start, one commit and WAL flush — carries many requests' writes.

export interface BatcherStats {
  /** Statements run. */
  batches: number;
  /** Calls carried by them. */
  items: number;
  /** The largest batch so far. */
  largest: number;
}

interface Pending<Item, Result> {
  readonly item: Item;
  readonly resolve: (result: Result) => void;
  readonly reject: (error: unknown) => void;
}

export class NaturalBatcher<Item, Result> {
  private readonly queue: Pending<Item, Result>[] = [];
  private busy = 0;
  private readonly counts: BatcherStats = { batches: 0, items: 0, largest: 0 };

  /**
   * @param run runs one statement for the items and returns one result per item, in order; a rejection
   *   fails every item of that batch.
   */
  constructor(
    private readonly run: (items: readonly Item[]) => Promise<readonly Result[]>,
    private readonly lanes: number,
    private readonly maxBatch: number,
  ) {
    if (!(lanes >= 1 && maxBatch >= 1))
      throw new Error('a batcher needs at least one lane and item');
  }

  submit(item: Item): Promise<Result> {
    return new Promise<Result>((resolve, reject) => {
      this.queue.push({ item, resolve, reject });
      this.pump();
    });
  }

  stats(): BatcherStats {
    return { ...this.counts };
  }

  private pump(): void {
    while (this.busy < this.lanes && this.queue.length > 0) {
      const batch = this.queue.splice(0, this.maxBatch);
      this.busy++;
      this.counts.batches++;
      this.counts.items += batch.length;
      this.counts.largest = Math.max(this.counts.largest, batch.length);
      // runBatch settles every item itself and never rejects.
      void this.runBatch(batch).finally(() => {
        this.busy--;
        this.pump();
      });
    }
  }

  private async runBatch(batch: Pending<Item, Result>[]): Promise<void> {
    try {
      const results = await this.run(batch.map((pending) => pending.item));
      if (results.length !== batch.length)
        throw new Error(`a batch of ${batch.length} returned ${results.length} results`);
      batch.forEach((pending, index) => pending.resolve(results[index]!));
    } catch (error) {
      for (const pending of batch) pending.reject(error);
    }
  }
}
