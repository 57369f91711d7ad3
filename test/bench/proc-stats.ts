// What the kernel knows about the processes under test (Linux /proc): CPU time from
// /proc/<pid>/stat, memory from /proc/<pid>/status, per-core busy time from /proc/stat, and a
// 100 ms VmRSS sampler for per-scenario peaks (VmHWM only resets when a process starts).
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';

/** Clock ticks per second of utime/stime (`getconf CLK_TCK`, almost always 100). */
export const CLOCK_TICKS_PER_S = readClockTicks();

function readClockTicks(): number {
  try {
    const ticks = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());
    return Number.isInteger(ticks) && ticks > 0 ? ticks : 100;
  } catch {
    return 100;
  }
}

interface StatTimes {
  readonly ppid: number;
  readonly userTicks: number;
  readonly systemTicks: number;
  /** utime + stime of the process itself, in ticks. */
  readonly ownTicks: number;
  /** cutime + cstime: children it has already waited for (a postmaster reaps its backends). */
  readonly reapedChildTicks: number;
}

function readStat(pid: number): StatTimes | undefined {
  let text: string;
  try {
    text = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined;
  }
  // Field 2 (comm) is parenthesised and may contain spaces: split after the last ')'.
  // fields[i] is stat field i + 3: 4 ppid, 14 utime, 15 stime, 16 cutime, 17 cstime.
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  const field = (n: number): number => Number(fields[n - 3]);
  return {
    ppid: field(4),
    userTicks: field(14),
    systemTicks: field(15),
    ownTicks: field(14) + field(15),
    reapedChildTicks: field(16) + field(17),
  };
}

const ticksToMicros = (ticks: number): number => (ticks * 1_000_000) / CLOCK_TICKS_PER_S;

/** User + system CPU of one process (all its threads), in µs; undefined once it has exited. */
export function processCpuMicros(pid: number): number | undefined {
  const stat = readStat(pid);
  return stat ? ticksToMicros(stat.ownTicks) : undefined;
}

/** The same, split into user and system (kernel: syscalls, and loopback TCP work done inline). */
export function processCpuSplitMicros(pid: number): { user: number; system: number } | undefined {
  const stat = readStat(pid);
  return stat
    ? { user: ticksToMicros(stat.userTicks), system: ticksToMicros(stat.systemTicks) }
    : undefined;
}

/**
 * CPU of a process and all its descendants, in µs: living ones read directly, exited ones through
 * their parent's cutime/cstime. Right for a postmaster, which reaps its backends; a backend that
 * exits between two readings moves from "living" to "reaped" without being counted twice.
 */
export function treeCpuMicros(rootPid: number): number | undefined {
  const root = readStat(rootPid);
  if (!root) return undefined;
  const children = new Map<number, number[]>();
  const stats = new Map<number, StatTimes>();
  for (const entry of fs.readdirSync('/proc')) {
    const pid = Number(entry);
    if (!Number.isInteger(pid) || pid <= 0) continue;
    const stat = readStat(pid);
    if (!stat) continue;
    stats.set(pid, stat);
    const siblings = children.get(stat.ppid);
    if (siblings) siblings.push(pid);
    else children.set(stat.ppid, [pid]);
  }
  let ticks = 0;
  const pending = [rootPid];
  while (pending.length > 0) {
    const pid = pending.pop() as number;
    const stat = pid === rootPid ? root : stats.get(pid);
    if (!stat) continue;
    ticks += stat.ownTicks + stat.reapedChildTicks;
    pending.push(...(children.get(pid) ?? []));
  }
  return ticksToMicros(ticks);
}

export interface MemoryReading {
  /** Resident set size now, bytes. */
  readonly rssBytes: number;
  /** Peak resident set size since the process started (VmHWM), bytes. */
  readonly hwmBytes: number;
}

export function readMemory(pid: number): MemoryReading | undefined {
  const status = readStatus(pid);
  if (!status) return undefined;
  return { rssBytes: kb(status.get('VmRSS')), hwmBytes: kb(status.get('VmHWM')) };
}

/** The CPUs a process may run on, as the kernel prints them ("1", "0-1"). */
export function readAffinity(pid: number): string | undefined {
  return readStatus(pid)?.get('Cpus_allowed_list');
}

function readStatus(pid: number): Map<string, string> | undefined {
  let text: string;
  try {
    text = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  } catch {
    return undefined;
  }
  const fields = new Map<string, string>();
  for (const line of text.split('\n')) {
    const colon = line.indexOf(':');
    if (colon > 0) fields.set(line.slice(0, colon), line.slice(colon + 1).trim());
  }
  return fields;
}

const kb = (value: string | undefined): number => (value ? Number.parseInt(value, 10) * 1024 : 0);

export interface CoreTimes {
  /** Ticks per core, keyed by core number: busy = everything but idle and iowait. */
  readonly busy: Map<number, number>;
  readonly total: Map<number, number>;
}

export function readCoreTimes(): CoreTimes {
  const busy = new Map<number, number>();
  const total = new Map<number, number>();
  for (const line of fs.readFileSync('/proc/stat', 'utf8').split('\n')) {
    const match = /^cpu(\d+)\s+(.*)$/.exec(line);
    if (!match) continue;
    const values = (match[2] ?? '').split(/\s+/).map(Number);
    // user nice system idle iowait irq softirq steal (guest time is already inside user).
    const all = values.slice(0, 8).reduce((sum, value) => sum + value, 0);
    const idle = (values[3] ?? 0) + (values[4] ?? 0);
    busy.set(Number(match[1]), all - idle);
    total.set(Number(match[1]), all);
  }
  return { busy, total };
}

/** Busy percentage of one core between two readings. */
export function coreBusyPercent(before: CoreTimes, after: CoreTimes, core: number): number {
  const busy = (after.busy.get(core) ?? 0) - (before.busy.get(core) ?? 0);
  const total = (after.total.get(core) ?? 0) - (before.total.get(core) ?? 0);
  return total > 0 ? (100 * busy) / total : 0;
}

/**
 * Samples VmRSS of the watched processes every `intervalMs`: the peak within a window (a scenario)
 * and since the sampler started. A process that exits keeps its last peaks.
 */
export class RssSampler {
  private readonly windowPeaks = new Map<number, number>();
  private readonly overallPeaks = new Map<number, number>();
  private readonly watched = new Set<number>();
  private readonly timer: NodeJS.Timeout;

  constructor(intervalMs = 100) {
    this.timer = setInterval(() => this.sample(), intervalMs);
    this.timer.unref();
  }

  watch(pid: number): void {
    this.watched.add(pid);
    this.sample();
  }

  unwatch(pid: number): void {
    this.sample();
    this.watched.delete(pid);
  }

  /** Peaks since the last call (or since watching began), and starts a new window. */
  takeWindow(): Map<number, number> {
    this.sample();
    const peaks = new Map(this.windowPeaks);
    this.windowPeaks.clear();
    for (const pid of this.watched) {
      const memory = readMemory(pid);
      if (memory) this.windowPeaks.set(pid, memory.rssBytes);
    }
    return peaks;
  }

  overallPeak(pid: number): number | undefined {
    return this.overallPeaks.get(pid);
  }

  stop(): void {
    clearInterval(this.timer);
  }

  private sample(): void {
    for (const pid of this.watched) {
      const memory = readMemory(pid);
      if (!memory) continue;
      this.windowPeaks.set(pid, Math.max(this.windowPeaks.get(pid) ?? 0, memory.rssBytes));
      this.overallPeaks.set(pid, Math.max(this.overallPeaks.get(pid) ?? 0, memory.rssBytes));
    }
  }
}
