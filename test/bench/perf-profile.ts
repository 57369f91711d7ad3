// On-CPU profile of the proxy with Linux `perf` (--perf): software cpu-clock samples of all its
// threads, kernel included, over the measured window only. Unlike V8's --cpu-prof, which samples
// wall-clock time and so charges time spent preempted (by PostgreSQL or the upstream on the same
// core) to whatever syscall was running, these are samples of the CPU the proxy really used.
// JIT frames get names from the map node writes with --perf-basic-prof (/tmp/perf-<pid>.map).
//
// Each sample is charged to the nearest frame that belongs to our code (dist/…) or a package
// (node_modules/<name>) — so a socket write done for pg counts as pg — else to the nearest node core
// module, else to "(event loop)", "(kernel)" or "(gc)".
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { type Child, spawnPinned } from './children';
import type { SelfTime } from './profile-summary';

export const PERF = ['/usr/bin/perf', '/usr/local/bin/perf'].find((file) => fs.existsSync(file));

export interface PerfSummary {
  readonly file: string;
  readonly samples: number;
  /** Where the CPU is when sampled: user space, GC, or kernel by syscall. */
  readonly leaf: SelfTime[];
  /** Charged to the nearest package or proxy module frame (see above). */
  readonly owners: SelfTime[];
  /** Share of samples with a frame of that package/module anywhere on the stack. */
  readonly inclusive: SelfTime[];
}

export class PerfRecording {
  private constructor(
    private readonly child: Child,
    readonly file: string,
  ) {}

  /** Starts `perf record` on `pid`, itself pinned to `core` (the load generator's). */
  static async start(pid: number, file: string, core: number | undefined): Promise<PerfRecording> {
    if (!PERF) throw new Error('perf is not installed');
    fs.mkdirSync(path.dirname(file), { recursive: true });
    const child = spawnPinned(
      'perf',
      PERF,
      ['record', '-q', '-F', '997', '-g', '-p', String(pid), '-o', file],
      { core },
    );
    child.expectExit();
    // perf needs a moment to attach; samples before that are simply missing from the window.
    await new Promise((resolve) => setTimeout(resolve, 150));
    if (!child.running) throw new Error(`perf record failed:\n${child.stderr()}`);
    return new PerfRecording(child, file);
  }

  async stop(): Promise<void> {
    if (this.child.running) this.child.process.kill('SIGINT');
    await this.child.exited;
  }
}

export function summarisePerf(file: string, top = 15): PerfSummary {
  const text = execFileSync(PERF as string, ['script', '-i', file], {
    encoding: 'utf8',
    maxBuffer: 1024 * 1024 * 1024,
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  const leaf = new Map<string, number>();
  const owners = new Map<string, number>();
  const inclusive = new Map<string, number>();
  const add = (map: Map<string, number>, key: string): void => {
    map.set(key, (map.get(key) ?? 0) + 1);
  };
  let samples = 0;
  for (const block of text.split(/\n\s*\n/)) {
    const frames = block
      .split('\n')
      .filter((line) => /^\s/.test(line))
      .map((line) => line.trim());
    if (frames.length === 0) continue;
    samples++;
    const inGc = frames.some((frame) => GC_FRAME.test(frame));
    add(leaf, leafCategory(frames, inGc));
    const owner =
      frames.map(ownerOf).find((name) => name !== undefined) ??
      frames.map(nodeModuleOf).find((name) => name !== undefined) ??
      withoutJs(frames, inGc);
    add(owners, owner);
    const seen = new Set<string>();
    for (const frame of frames) {
      const name = ownerOf(frame) ?? nodeModuleOf(frame);
      if (name && !seen.has(name)) {
        seen.add(name);
        add(inclusive, name);
      }
    }
  }
  const rank = (map: Map<string, number>): SelfTime[] =>
    [...map.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([name, count]) => ({
        name,
        ms: count, // one sample ≈ 1 ms at 997 Hz
        percent: samples > 0 ? Math.round((1000 * count) / samples) / 10 : 0,
      }));
  return {
    file,
    samples,
    leaf: rank(leaf),
    owners: rank(owners),
    inclusive: rank(inclusive),
  };
}

const GC_FRAME = /Scavenger|MarkCompact|Heap::|Sweeper|ConcurrentMarking|MinorMarkSweep/;

function leafCategory(frames: string[], inGc: boolean): string {
  if (frames[0]?.includes('[kernel')) {
    // The first user-space frame names the syscall (libc wrapper) that entered the kernel.
    const user = frames.find((frame) => !frame.includes('[kernel'));
    const symbol = /^[0-9a-f]+ (\S+?)\+/.exec(user ?? '')?.[1] ?? 'interrupt';
    return `kernel: ${symbol.replace(/^__GI___|^__libc_|@@.*$/g, '')}`;
  }
  return inGc ? 'user: gc' : 'user: js, v8, node';
}

/** A sample with no JS frame: which part of the runtime it is in. */
function withoutJs(frames: string[], inGc: boolean): string {
  const has = (text: string): boolean => frames.some((frame) => frame.includes(text));
  if (inGc) return '(gc)';
  if (has('uv_run') || has('uv__io_poll')) return '(event loop: libuv, before any JS)';
  if (has('start_thread')) return '(helper threads: V8 platform, libuv pool)';
  if (
    /\b(_int_malloc|_int_free|malloc|free|unlink_chunk|malloc_consolidate|cfree)\b/.test(
      frames[0] ?? '',
    )
  ) {
    return '(malloc/free: libc, not unwound further)';
  }
  return '(native, not unwound further)';
}

function ownerOf(frame: string): string | undefined {
  const ours = /\/(dist\/[^\s:]+)/.exec(frame);
  if (ours && !frame.includes('/node_modules/')) return ours[1];
  return /\/node_modules\/((?:@[^/\s]+\/)?[^/\s]+)\//.exec(frame)?.[1];
}

function nodeModuleOf(frame: string): string | undefined {
  return / (node:[\w/]+):\d/.exec(frame)?.[1];
}

export function formatPerf(label: string, summary: PerfSummary): string {
  const list = (entries: SelfTime[]): string[] =>
    entries.map((entry) => `    ${entry.percent.toFixed(1).padStart(5)}%  ${entry.name}`);
  return [
    `${label}: ${summary.samples} on-CPU samples (perf, ~1 ms each)`,
    `  ${path.relative(process.cwd(), summary.file)}`,
    '  where the CPU is:',
    ...list(summary.leaf.slice(0, 8)),
    '  charged to the nearest package or proxy module (its native and kernel work included):',
    ...list(summary.owners),
    '  inclusive (a frame anywhere on the stack):',
    ...list(summary.inclusive),
  ].join('\n');
}
