// Natural batching for store statements: at most `lanes` statements run at once, and calls that
// arrive while every lane is busy go together in the next statement. No timer and no added latency
// when the store keeps up (a lone call runs at once, alone); under load one statement — one parse,
// one executor start, one commit and WAL flush — carries many requests.

export interface BatcherStats {
  /** Statements run. */
  batches: number;
  /** Calls carried by them. */
  items: number;
  /** The largest batch so far. */
  largest: number;
}

export interface BatcherOptions<Item> {
  /** Statements at once; calls beyond wait for a lane. */
  readonly lanes: number;
  /** Calls per statement at most. */
  readonly maxBatch: number;
  /**
   * Calls with equal keys never share a statement (one statement may not touch a row twice): a call
   * whose key is already queued or running is run alone, at once, beside the batches.
   */
  readonly keyOf?: (item: Item) => string;
  /**
   * Calls of different groups never share a statement (on Citus: the key's shard, so that each
   * statement goes to one shard). A free lane takes the oldest waiting call and every waiting call
   * of its group, up to maxBatch: first come, first served, and the groups fill while lanes are busy.
   */
  readonly groupOf?: (item: Item) => number;
  /**
   * A batch that fails with such an error (e.g. a deadlock between two batches locking rows in
   * different orders) is retried one call per statement; one-row statements cannot deadlock.
   */
  readonly retryAlone?: (error: unknown) => boolean;
}

interface Pending<Item, Result> {
  readonly item: Item;
  readonly key: string | undefined;
  readonly group: number;
  readonly resolve: (result: Result) => void;
  readonly reject: (error: unknown) => void;
}

export class NaturalBatcher<Item, Result> {
  private queue: Pending<Item, Result>[] = [];
  private readonly keys = new Set<string>();
  private busy = 0;
  /** Set once a call of a group other than 0 came: until then every call is of one group. */
  private grouped = false;
  private readonly counts: BatcherStats = { batches: 0, items: 0, largest: 0 };

  /**
   * @param run runs one statement for the items and returns one result per item, in order; a rejection
   *   fails every item of that batch.
   */
  constructor(
    private readonly run: (items: readonly Item[]) => Promise<readonly Result[]>,
    private readonly options: BatcherOptions<Item>,
  ) {
    if (!(options.lanes >= 1 && options.maxBatch >= 1))
      throw new Error('a batcher needs at least one lane and item');
  }

  submit(item: Item): Promise<Result> {
    const key = this.options.keyOf?.(item);
    if (key !== undefined && this.keys.has(key)) return this.runAlone(item);
    if (key !== undefined) this.keys.add(key);
    const group = this.options.groupOf?.(item) ?? 0;
    if (group !== 0) this.grouped = true;
    return new Promise<Result>((resolve, reject) => {
      this.queue.push({ item, key, group, resolve, reject });
      this.pump();
    });
  }

  stats(): BatcherStats {
    return { ...this.counts };
  }

  private pump(): void {
    while (this.busy < this.options.lanes && this.queue.length > 0) {
      const batch = this.take();
      this.busy++;
      this.count(batch.length);
      // runBatch settles every item itself, frees the lane and never rejects.
      void this.runBatch(batch);
    }
  }

  /** The batch's lane is free again: its keys may be queued anew, and the next batch may start. */
  private done(batch: readonly Pending<Item, Result>[]): void {
    for (const pending of batch) if (pending.key !== undefined) this.keys.delete(pending.key);
    this.busy--;
    this.pump();
  }

  /** The next batch: the oldest waiting call and those after it of its group, up to maxBatch. */
  private take(): Pending<Item, Result>[] {
    const { maxBatch } = this.options;
    if (!this.grouped) return this.queue.splice(0, maxBatch);
    const group = this.queue[0]!.group;
    const batch: Pending<Item, Result>[] = [];
    const rest: Pending<Item, Result>[] = [];
    for (const pending of this.queue) {
      (pending.group === group && batch.length < maxBatch ? batch : rest).push(pending);
    }
    this.queue = rest;
    return batch;
  }

  private async runBatch(batch: Pending<Item, Result>[]): Promise<void> {
    try {
      const results = await this.run(batch.map((pending) => pending.item));
      if (results.length !== batch.length)
        throw new Error(`a batch of ${batch.length} returned ${results.length} results`);
      batch.forEach((pending, index) => pending.resolve(results[index]!));
    } catch (error) {
      if (batch.length > 1 && this.options.retryAlone?.(error)) {
        await Promise.all(
          batch.map((pending) => this.runAlone(pending.item).then(pending.resolve, pending.reject)),
        );
      } else for (const pending of batch) pending.reject(error);
    } finally {
      this.done(batch);
    }
  }

  private async runAlone(item: Item): Promise<Result> {
    this.count(1);
    const results = await this.run([item]);
    if (results.length !== 1) throw new Error(`a batch of 1 returned ${results.length} results`);
    return results[0]!;
  }

  private count(items: number): void {
    this.counts.batches++;
    this.counts.items += items;
    this.counts.largest = Math.max(this.counts.largest, items);
  }
}
