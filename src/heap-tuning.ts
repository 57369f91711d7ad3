// The V8 flags the serving process runs with. V8 reads them when the process starts, so `serve`
// starts itself again with them (below) rather than setting them at run time: V8 leaves a flag
// changed after it started undefined, and the cluster workers that changed concurrent marking while
// they loaded their modules died now and then at start-up on Node 22 (SIGSEGV, SIGTRAP with a
// stack trace from the collector).
import v8 from 'node:v8';

// Concurrent marking off. Twenty 1 MB uploads at once churn through a few hundred megabytes of
// socket buffers a second; with concurrent marking on, V8 kept starting full collections early
// (ten to fifteen a second in the big-body bench, each marking the whole heap to free about one
// megabyte), and its four markers ran on the event loop's core whenever the proxy had one core
// (pinned, or a one-CPU container): an unrelated GET waited p99 41–48 ms in three runs. With
// incremental marking alone the same load runs on scavenges and zero to two full collections a
// second, marked on the main thread in steps: p99 23–26 ms in the three runs just before those, and
// pass-through, new-key and replay throughput unchanged within the bench's noise. The heap is tens
// of megabytes: marking it needs no helpers. Measured in test/bench/README.md (session 8).
const NO_CONCURRENT_MARKING = '--no-concurrent-marking';

/** `--concurrent-marking`, `--no-concurrent-marking`, with `_` or `-`, with or without `=value`. */
const MARKING_CHOICE = /^--(no[-_])?concurrent[-_]marking(=|$)/;

// The young generation: npm start used to pass 2 × 32 MB, which bought about a fifth of the
// pass-through's CPU on Node 20; on Node 26 the bench sees no difference in CPU per request between
// 2 × 32 and 2 × 8 MB within its noise, while 2 × 8 MB takes the peak under the bench's load from
// 356–409 MB resident to 248–281 MB (three alternating runs each, test/bench/README.md).
//
// `serve` starts itself again with what node was not given, in place (process.execve: the same
// process id, signals and descriptors), and npm start, the image and the `idempotency-proxy` command
// all run with it; cluster workers inherit the primary's flags. An operator who passes any heap
// size (on node's command line or in NODE_OPTIONS), or either marking flag (on the command line
// only: node refuses it in NODE_OPTIONS), keeps theirs, and nothing is added for it.
//
// No cap on the old generation: --max-old-space-size=128 took the peak to about 200 MB, but a
// process whose live heap outgrows it is killed, and what a proxy keeps alive grows with its
// connections and with the parsed form of large JSON bodies (five to fifteen times their size).
// docs/operations.md says how to choose one.
const YOUNG_GENERATION = '--max-semi-space-size=8';

// The garbage of starting: loading the modules, compiling the config and migrating the store grow
// the young generation to its full 2 × 8 MB and leave the old one a third garbage, and an idle
// process never collects again, so it sat at about 103 MB resident. One collection that gives the
// pages back (V8's "last resort" flavour, what it does under memory pressure: 30–70 ms, once, before
// the first connection) takes it to about 89 MB. Node offers it only through `gc`, which
// --expose-gc defines; nothing else here calls it.
const EXPOSE_GC = '--expose-gc';

/** What `serve` runs with when the operator chose nothing. */
export const SERVING_HEAP_FLAGS = [YOUNG_GENERATION, NO_CONCURRENT_MARKING, EXPOSE_GC] as const;

/** --expose-gc or --expose_gc (node takes it in NODE_OPTIONS too). */
const GC_EXPOSED = /(^|\s)--expose[-_]gc(\s|$)/;

/** --max-semi-space-size, --max-old-space-size, --max-heap-size (or --max_…), with a value. */
const HEAP_SIZE_CHOICE = /(^|\s)--max[-_](semi[-_]space|old[-_]space|heap)[-_]size\b/;

/** The node flags `serve` restarts with: those of the serving flags the operator did not choose. */
export function servingHeapFlags(
  execArgv: readonly string[] = process.execArgv,
  nodeOptions: string | undefined = process.env.NODE_OPTIONS,
): readonly string[] {
  const given = [...execArgv, nodeOptions ?? ''];
  const flags: string[] = [];
  if (!given.some((arg) => HEAP_SIZE_CHOICE.test(arg))) flags.push(YOUNG_GENERATION);
  if (!execArgv.some((arg) => MARKING_CHOICE.test(arg))) flags.push(NO_CONCURRENT_MARKING);
  if (!given.some((arg) => GC_EXPOSED.test(arg))) flags.push(EXPOSE_GC);
  return flags;
}

/**
 * Collects the garbage of starting and returns its pages to the system; the heap's size before and
 * after, or nothing when node was started without --expose-gc. Call it once everything is loaded,
 * just before listening: it holds the process for tens of milliseconds.
 */
export function collectStartupGarbage():
  { heapBytesBefore: number; heapBytesAfter: number } | undefined {
  if (typeof globalThis.gc !== 'function') return undefined;
  const heapBytesBefore = v8.getHeapStatistics().total_heap_size;
  globalThis.gc({ type: 'major', execution: 'sync', flavor: 'last-resort' });
  return { heapBytesBefore, heapBytesAfter: v8.getHeapStatistics().total_heap_size };
}

/**
 * Replaces this process with node running the same script and arguments under the serving flags;
 * returns when there is nothing to do (all chosen, or no execve: Windows). Call it before anything
 * is written or listened on.
 */
export function restartWithServingHeap(): void {
  const flags = servingHeapFlags();
  if (flags.length === 0 || typeof process.execve !== 'function') return;
  const script = process.argv[1];
  if (script === undefined) return;
  process.execve(process.execPath, [
    process.execPath,
    ...flags,
    ...process.execArgv,
    script,
    ...process.argv.slice(2),
  ]);
}
