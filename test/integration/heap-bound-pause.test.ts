// The heap bound waits after each collection in proportion to its own collection's pause, which it
// reads from V8's report of the forced collection, not to the whole time gc() held the thread: asked
// for while V8 is marking, gc() first finishes V8's own cycle. Here a real process's gc() is made to
// hold the thread 300 ms besides its real collection (V8's cycle, stood in for by a busy wait, as it
// cannot be started on demand); the bound must count the real collection only.
import { execFileSync } from 'node:child_process';
import path from 'node:path';

const DIST = path.resolve(__dirname, '../../dist');

const COLLECTING = `
const { startHeapBound } = require(${JSON.stringify(`${DIST}/heap-bound`)});
const { PerformanceObserver, constants } = require('node:perf_hooks');
const realGc = globalThis.gc;
globalThis.gc = (...args) => {
  const until = performance.now() + 300;
  while (performance.now() < until);
  return realGc(...args);
};
const forced = [];
new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) {
    if (entry.detail.kind === constants.NODE_PERFORMANCE_GC_MAJOR &&
        entry.detail.flags & constants.NODE_PERFORMANCE_GC_FLAGS_FORCED) forced.push(entry.duration);
  }
}).observe({ entryTypes: ['gc'] });
// Objects that live a few scavenges, then die: the old generation fills with garbage to collect.
let recent = [];
const churn = setInterval(() => {
  for (let i = 0; i < 20000; i++) recent.push({ i, text: 'x' + i });
  if (recent.length > 200000) recent = recent.slice(100000);
}, 10);
const collections = [];
const bound = startHeapBound(1, (collection) => collections.push(collection.pauseMs));
setTimeout(() => {
  bound.stop();
  clearInterval(churn);
  console.log(JSON.stringify({ collections, forced }));
}, 3000);
`;

test("the wait after a collection is twenty times V8's forced collection, not the whole gc() call", () => {
  const { collections, forced } = JSON.parse(
    execFileSync(process.execPath, ['--expose-gc', '-e', COLLECTING], { encoding: 'utf8' }),
  ) as { collections: number[]; forced: number[] };
  // Each call held the thread over 300 ms: counted whole, the next would wait over 6 s.
  expect(collections.length).toBeGreaterThan(0);
  for (const pauseMs of collections) expect(pauseMs).toBeGreaterThanOrEqual(300);
  // V8 reported each real collection, and its pause is what the bound waited on.
  expect(forced.length).toBeGreaterThanOrEqual(collections.length);
  expect(Math.max(...forced)).toBeLessThan(100);
  expect(collections.length).toBeGreaterThanOrEqual(2);
});
