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
