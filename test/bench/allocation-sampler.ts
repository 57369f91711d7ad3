// Preloaded into the proxy to see what it allocates, garbage included:
//
//   ALLOCATION_SAMPLE_AFTER_MS=9000 ALLOCATION_SAMPLE_MS=6000 npm run bench -- --scenarios new-key \
//     --duration 12 --warmup 4 --proxy-node-arg=--require=./dist/bench/allocation-sampler.js
//
// V8's sampling heap profiler runs over one window (from ALLOCATION_SAMPLE_AFTER_MS after start,
// for ALLOCATION_SAMPLE_MS) and counts the objects the collector has already taken too: without
// that (node --heap-prof) a profile shows only what survives, and a request's garbage is what the
// collector's time follows. The profile goes to ALLOCATION_SAMPLE_DIR (the temp dir) as
// allocation-<pid>.heapprofile, which Chrome DevTools opens; allocation-summary.ts reads it.
//
// ALLOCATION_SAMPLE_SURVIVORS=1 leaves out what a scavenge took: what is left is what outlived the
// young generation (promoted, whether a full collection took it later or not) and what was still
// young at the end. Promoted garbage is what makes full collections, whose marking runs on the
// event loop's thread: this profile says which allocations it comes from.
import fs from 'node:fs';
import { Session } from 'node:inspector';
import os from 'node:os';
import path from 'node:path';

const afterMs = Number(process.env.ALLOCATION_SAMPLE_AFTER_MS ?? 9_000);
const forMs = Number(process.env.ALLOCATION_SAMPLE_MS ?? 6_000);
const dir = process.env.ALLOCATION_SAMPLE_DIR ?? os.tmpdir();
// One sample per 512 bytes allocated on average (V8's default is 32 KB): a request's few
// kilobytes show up function by function.
const INTERVAL_BYTES = 512;
const survivorsOnly = process.env.ALLOCATION_SAMPLE_SURVIVORS === '1';

const session = new Session();
session.connect();

setTimeout(() => {
  session.post('HeapProfiler.enable', () => {
    session.post(
      'HeapProfiler.startSampling',
      {
        samplingInterval: INTERVAL_BYTES,
        includeObjectsCollectedByMajorGC: true,
        includeObjectsCollectedByMinorGC: !survivorsOnly,
      },
      (error) => {
        if (error) return void process.stderr.write(`allocation-sampler: ${error.message}\n`);
        setTimeout(write, forMs).unref();
      },
    );
  });
}, afterMs).unref();

function write(): void {
  session.post('HeapProfiler.stopSampling', (error, result) => {
    if (error) return void process.stderr.write(`allocation-sampler: ${error.message}\n`);
    const file = path.join(dir, `allocation-${process.pid}.heapprofile`);
    fs.writeFileSync(file, JSON.stringify(result.profile));
    process.stderr.write(`allocation-sampler: ${forMs} ms of allocations in ${file}\n`);
  });
}
