// What is running on an embedded PostgreSQL data directory, read from files in it:
//   postmaster.pid            PostgreSQL's own lock file: the server's PID, port and status
//   idempotency-proxy.owner   ours: the PID and command of the proxy process that started the server
//   idempotency-proxy.state   ours: the port it last listened on, taken again at the next start
// Together they tell the three cases apart at startup: nothing running; a server whose owner lives
// (another proxy, or an operator command: leave it alone); a server whose owner died (kill -9, a
// crash) — an orphan, which the next start stops before starting its own.
import fs from 'node:fs';
import path from 'node:path';

export interface Postmaster {
  readonly pid: number;
  readonly port: number;
  /** `ready` once it accepts connections; `starting`, `stopping` or `standby` otherwise. */
  readonly status: string;
}

export interface Owner {
  readonly pid: number;
  readonly command: string;
  readonly since: string;
  /** An operator command (inspect, prune, migrate) that stops its server within seconds. */
  readonly shortLived: boolean;
}

const OWNER_FILE = 'idempotency-proxy.owner';
const STATE_FILE = 'idempotency-proxy.state';

export function stateFile(dataDir: string): string {
  return path.join(dataDir, STATE_FILE);
}

/** The port the server last listened on, if recorded. */
export function rememberedPort(dataDir: string): number | undefined {
  try {
    const { port } = JSON.parse(fs.readFileSync(stateFile(dataDir), 'utf8')) as { port?: unknown };
    return Number.isInteger(port) && (port as number) > 0 && (port as number) < 65536
      ? (port as number)
      : undefined;
  } catch {
    return undefined; // none yet (a first start, or an older version's data dir)
  }
}

/** Records the port a server started on; a temp file renamed over the old one. */
export function rememberPort(dataDir: string, port: number): void {
  if (rememberedPort(dataDir) === port) return;
  const staging = `${stateFile(dataDir)}.${process.pid}`;
  fs.writeFileSync(staging, `${JSON.stringify({ port })}\n`, { mode: 0o600 });
  fs.renameSync(staging, stateFile(dataDir));
}

/** The server running on `dataDir`, or undefined when none is (no lock file, or its PID is dead). */
export function runningPostmaster(dataDir: string): Postmaster | undefined {
  let lines: string[];
  try {
    lines = fs.readFileSync(path.join(dataDir, 'postmaster.pid'), 'utf8').split('\n');
  } catch {
    return undefined;
  }
  // Lines: pid, data dir, start time, port, socket dir, listen address, shared memory key, status.
  const pid = Number(lines[0]);
  const port = Number(lines[3]);
  if (!Number.isInteger(pid) || pid <= 0 || !isRunning(pid, 'postgres')) return undefined;
  return { pid, port, status: (lines[7] ?? '').trim() || 'starting' };
}

/** The recorded owner of the server on `dataDir`, if that process still runs. */
export function liveOwner(dataDir: string): Owner | undefined {
  let owner: Partial<Owner>;
  try {
    owner = JSON.parse(fs.readFileSync(path.join(dataDir, OWNER_FILE), 'utf8')) as Partial<Owner>;
  } catch {
    return undefined;
  }
  const { pid, command, since, shortLived } = owner;
  if (typeof pid !== 'number' || !isRunning(pid, 'node')) return undefined;
  return { pid, command: String(command), since: String(since), shortLived: shortLived === true };
}

/**
 * Makes this process the owner of `dataDir`'s server, unless another live process is: then returns
 * that owner. The file is created exclusively, so of two proxies starting at once one wins; a file
 * whose process is gone (kill -9) is replaced.
 */
export function claimOwner(
  dataDir: string,
  claim: Pick<Owner, 'command' | 'shortLived'>,
): Owner | undefined {
  const file = path.join(dataDir, OWNER_FILE);
  const mine: Owner = { pid: process.pid, since: new Date().toISOString(), ...claim };
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      fs.writeFileSync(file, `${JSON.stringify(mine)}\n`, { flag: 'wx' });
      return undefined;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    const owner = liveOwner(dataDir);
    if (owner && owner.pid !== process.pid) return owner;
    fs.rmSync(file, { force: true }); // its process is gone, or it is us from an earlier start
  }
  return liveOwner(dataDir);
}

/** Removes the owner file if it still names this process (a later owner's file is left alone). */
export function releaseOwner(dataDir: string): void {
  const file = path.join(dataDir, OWNER_FILE);
  try {
    const owner = JSON.parse(fs.readFileSync(file, 'utf8')) as Partial<Owner>;
    if (owner.pid === process.pid) fs.rmSync(file, { force: true });
  } catch {
    // Gone already.
  }
}

/**
 * Whether `pid` is a live process. On Linux also whether it is what we expect (its command line
 * mentions `expected`), so a PID reused after a reboot is not taken for our server or proxy; a
 * zombie — killed, not yet reaped by a parent that died too — counts as gone.
 */
export function isRunning(pid: number, expected: string): boolean {
  // kill(0) and kill(-n) signal process groups: never a PID.
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    if (/^\d+ \(.*\) Z/s.test(stat)) return false;
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(expected);
  } catch {
    return true; // no /proc (macOS): the signal check is all we have
  }
}
