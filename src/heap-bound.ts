// A soft bound on the JavaScript heap (heapTarget). Left to itself, V8 lets a busy proxy's heap grow
// to several times what it keeps alive: with its marking on the event loop's thread (heap-tuning.ts),
// a full collection runs in steps for a second or more, everything promoted meanwhile survives it,
// and the next limit is set from that inflated size. Under the bench's load the heap reached
// 80–130 MB around 20–45 MB of live objects. Here, whenever the heap's used bytes pass the target,
// the proxy runs one full collection at once, which leaves only what is alive (measured in
// test/bench/README.md). It is the kind of bound Go's GOMEMLIMIT is: a target, not a cap; a heap
// whose live objects outgrow it is collected less and less often, never killed.
import v8 from 'node:v8';
import {
  constants,
  type NodeGCPerformanceDetail,
  PerformanceObserver,
  performance,
} from 'node:perf_hooks';

/** How often the heap's size is read: ten reads a second cost nothing the bench can see. */
const CHECK_EVERY_MS = 100;

/**
 * The most of the wall-clock time the bound's collections may take: after a collection that took
 * p ms, the next waits at least p / share ms. A live heap near the target cannot make the proxy
 * collect back to back. p is the bound's own collection, as V8 reports it (forcedCollectionTook):
 * asked for while V8 is marking, `gc()` first finishes V8's own cycle, 30–80 ms that V8 would have
 * spent anyway, and counting those made the bound wait 1.5–2 s while the heap doubled.
 */
const MAX_PAUSE_SHARE = 0.05;

/** How V8 marks a collection somebody asked for (gc()), as against one it ran by itself. */
const FORCED = constants.NODE_PERFORMANCE_GC_FLAGS_FORCED;

/** One collection the bound ran. */
export interface HeapCollection {
  readonly pauseMs: number;
  readonly usedBytesBefore: number;
  readonly usedBytesAfter: number;
}

/** What the bound reads and does; V8's own in startHeapBound, a test's own in the unit tests. */
export interface HeapSources {
  usedBytes(): number;
  collect(): void;
  now(): number;
}

/** Decides, at each check, whether to collect now. */
export class HeapBound {
  /** Used bytes above which the next check collects: the target, or twice what survived the last. */
  private threshold: number;
  private notBefore = Number.NEGATIVE_INFINITY;
  /** When the last collection the bound asked for started and ended. */
  private lastAsked: { readonly started: number; readonly ended: number } | undefined;

  constructor(
    private readonly targetBytes: number,
    private readonly sources: HeapSources,
  ) {
    this.threshold = targetBytes;
  }

  check(): HeapCollection | undefined {
    const started = this.sources.now();
    if (started < this.notBefore) return undefined;
    const usedBytesBefore = this.sources.usedBytes();
    // V8's own collections took the heap back under the target: what is alive fits it again.
    if (usedBytesBefore <= this.targetBytes) this.threshold = this.targetBytes;
    if (usedBytesBefore <= this.threshold) return undefined;
    this.sources.collect();
    const ended = this.sources.now();
    const usedBytesAfter = this.sources.usedBytes();
    // Live objects beyond the target: wait for as much garbage again before collecting, so the work
    // per collection keeps pace with what it frees.
    this.threshold = Math.max(this.targetBytes, 2 * usedBytesAfter);
    const pauseMs = ended - started;
    this.lastAsked = { started, ended };
    this.notBefore = ended + pauseMs / MAX_PAUSE_SHARE;
    return { pauseMs, usedBytesBefore, usedBytesAfter };
  }

  /**
   * V8 reports a forced full collection that started at `startedAt` and took `pauseMs`. When it is
   * the one the last check asked for, the wait before the next is measured from its own pause, not
   * from the whole time `collect()` held the thread.
   */
  forcedCollectionTook(startedAt: number, pauseMs: number): void {
    const asked = this.lastAsked;
    if (asked === undefined || startedAt < asked.started || startedAt > asked.ended) return;
    this.notBefore = Math.min(this.notBefore, asked.ended + pauseMs / MAX_PAUSE_SHARE);
  }
}

export interface RunningHeapBound {
  stop(): void;
}

/**
 * Checks the heap against targetBytes ten times a second until stopped. Nothing runs when the
 * target is 0 or node was started without --expose-gc (`serve` adds it unless the operator chose
 * their own heap flags: heap-tuning.ts); undefined then. `holding`: what each collection holds
 * (see collectHolding), asked for once, only when the bound runs.
 */
export function startHeapBound(
  targetBytes: number,
  onCollected: (collection: HeapCollection) => void,
  holding: () => readonly object[] = () => [],
): RunningHeapBound | undefined {
  const gc = globalThis.gc;
  if (targetBytes <= 0 || typeof gc !== 'function') return undefined;
  const kept = holding();
  const bound = new HeapBound(targetBytes, {
    usedBytes: () => v8.getHeapStatistics().used_heap_size,
    collect: () => collectHolding(gc, kept),
    now: () => performance.now(),
  });
  // Node delivers GC entries after the collection, on its own turn: well before the next check.
  const observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      const { kind, flags } = (entry as unknown as { detail: NodeGCPerformanceDetail }).detail;
      if (kind === constants.NODE_PERFORMANCE_GC_MAJOR && flags & FORCED) {
        bound.forcedCollectionTook(entry.startTime, entry.duration);
      }
    }
  });
  observer.observe({ entryTypes: ['gc'] });
  const timer = setInterval(() => {
    const collection = bound.check();
    if (collection !== undefined) onCollected(collection);
  }, CHECK_EVERY_MS);
  timer.unref();
  return {
    stop: () => {
      clearInterval(timer);
      observer.disconnect();
    },
  };
}

/**
 * One full collection now, with `kept` passed along as arguments, which puts them on the stack: V8
 * marks the stack before it decides which dying shapes to retain, and it retains those whose class
 * and prototype are marked by then (short-lived-classes.ts says why that saves recompiling).
 * `gc` reads its first argument only.
 */
export function collectHolding(
  gc: NonNullable<typeof globalThis.gc>,
  kept: readonly object[],
): void {
  void (gc as (options: object, ...held: readonly object[]) => unknown)(
    { type: 'major', execution: 'sync' },
    ...kept,
  );
}
