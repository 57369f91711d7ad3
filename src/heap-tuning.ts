// V8 settings for the serving process, applied before it takes traffic.
//
// Concurrent marking off. Twenty 1 MB uploads at once churn through a few hundred megabytes of
// socket buffers a second; with concurrent marking on, V8 kept starting full collections early
// (ten to fifteen a second in the big-body bench, each marking the whole heap to free about one
// megabyte), and its four markers ran on the event loop's core whenever the proxy had one core
// (pinned, or a one-CPU container): an unrelated GET waited p99 41–48 ms in three runs. With
// incremental marking alone the same load runs on scavenges and zero to two full collections a
// second, marked on the main thread in steps: p99 23–26 ms in the three runs just before those, and
// pass-through, new-key and replay throughput unchanged within the bench's noise. The heap is tens
// of megabytes: marking it needs no helpers. Measured in test/bench/README.md (session 8).
//
// V8 reads this flag when a marking cycle starts, so setting it at run time takes effect (perf shows
// the main thread's marking visitor, and no concurrent one, afterwards). An operator who passes
// either spelling to node keeps theirs.
import v8 from 'node:v8';

/** `--concurrent-marking`, `--no-concurrent-marking`, with `_` or `-`, with or without `=value`. */
const OPERATORS_CHOICE = /^--(no[-_])?concurrent[-_]marking(=|$)/;

export function tuneHeapForServing(execArgv: readonly string[] = process.execArgv): boolean {
  if (execArgv.some((arg) => OPERATORS_CHOICE.test(arg))) return false;
  v8.setFlagsFromString('--no-concurrent-marking');
  return true;
}

// The young generation's size is another matter: V8 fixes it when the process starts, before any
// of our code runs. npm start used to pass 2 × 32 MB, which bought about a fifth of the
// pass-through's CPU on Node 20; on Node 26 the bench sees no difference in CPU per request between
// 2 × 32 and 2 × 8 MB within its noise, while 2 × 8 MB takes the peak under the bench's load from
// 356–409 MB resident to 248–281 MB (three alternating runs each, test/bench/README.md).
//
// So `serve` starts itself again with that size when node was not given one, in place
// (process.execve: the same process id, signals and descriptors), and npm start, the image and the
// `idempotency-proxy` command all run with it. An operator who passes any heap size (on node's
// command line or in NODE_OPTIONS) keeps theirs, and nothing is added. No cap on the old
// generation: --max-old-space-size=128 took the peak to about 200 MB, but a process whose live heap
// outgrows it is killed, and what a proxy keeps alive grows with its connections and with the
// parsed form of large JSON bodies (five to fifteen times their size). docs/operations.md says how to
// choose one.
export const SERVING_HEAP_FLAGS = ['--max-semi-space-size=8'] as const;

/** --max-semi-space-size, --max-old-space-size, --max-heap-size (or --max_…), with a value. */
const HEAP_SIZE_CHOICE = /(^|\s)--max[-_](semi[-_]space|old[-_]space|heap)[-_]size\b/;

/** The node flags `serve` restarts with; none when the operator chose a heap size themselves. */
export function servingHeapFlags(
  execArgv: readonly string[] = process.execArgv,
  nodeOptions: string | undefined = process.env.NODE_OPTIONS,
): readonly string[] {
  const chosen = [...execArgv, nodeOptions ?? ''].some((arg) => HEAP_SIZE_CHOICE.test(arg));
  return chosen ? [] : SERVING_HEAP_FLAGS;
}

/**
 * Replaces this process with node running the same script and arguments under the serving heap
 * sizes; returns when there is nothing to do (sizes chosen, or no execve: Windows, Node before
 * 22.15). Call it before anything is written or listened on.
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
