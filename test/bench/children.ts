// Every process the bench starts: pinned to a core with taskset (which execs, so the child's pid is
// the measured program's own pid), tracked in one registry, and stopped on exit or Ctrl-C.
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';

const TASKSET = ['/usr/bin/taskset', '/bin/taskset'].find((file) => fs.existsSync(file));

export const canPin = TASKSET !== undefined;

export interface SpawnOptions {
  /** Core to pin to; undefined = not pinned. */
  readonly core: number | undefined;
  readonly env?: NodeJS.ProcessEnv;
  /** An IPC channel, for the bench's own helper processes. */
  readonly ipc?: boolean;
  /** Where the child's stdout goes: ignored by default (the proxy logs a line per request there). */
  readonly stdout?: 'ignore' | 'inherit' | number;
  readonly cwd?: string;
}

export class Child {
  readonly exited: Promise<number | null>;
  private readonly stderrTail: string[] = [];
  private expectingExit = false;

  constructor(
    readonly name: string,
    readonly process: ChildProcess,
    /** The core it is pinned to, if any. */
    readonly core: number | undefined,
    onUnexpectedExit: (child: Child, code: number | null) => void,
  ) {
    this.process.stderr?.setEncoding('utf8');
    this.process.stderr?.on('data', (chunk: string) => {
      this.stderrTail.push(...chunk.split('\n').filter((line) => line.length > 0));
      if (this.stderrTail.length > 40) this.stderrTail.splice(0, this.stderrTail.length - 40);
    });
    this.exited = new Promise((resolve) => {
      this.process.once('exit', (code, signal) => {
        live.delete(this);
        const status = code ?? (signal ? 128 : null);
        if (!this.expectingExit) onUnexpectedExit(this, status);
        resolve(status);
      });
    });
  }

  get pid(): number {
    return this.process.pid ?? -1;
  }

  get running(): boolean {
    return this.process.exitCode === null && this.process.signalCode === null;
  }

  /** The last lines the child wrote to stderr, for error messages. */
  stderr(): string {
    return this.stderrTail.join('\n');
  }

  /** SIGTERM, then SIGKILL after `graceMs`. */
  async stop(graceMs = 5_000): Promise<void> {
    this.expectingExit = true;
    if (!this.running) return;
    this.process.kill('SIGTERM');
    const timer = setTimeout(() => this.process.kill('SIGKILL'), graceMs);
    await this.exited;
    clearTimeout(timer);
  }

  /** Marks an exit the bench asked for some other way (an IPC "stop"). */
  expectExit(): void {
    this.expectingExit = true;
  }
}

const live = new Set<Child>();

let unexpectedExitHandler: (child: Child, code: number | null) => void = () => undefined;

/** Called when a child exits without the bench asking it to (a crash mid-run). */
export function onUnexpectedExit(handler: (child: Child, code: number | null) => void): void {
  unexpectedExitHandler = handler;
}

export function spawnPinned(
  name: string,
  command: string,
  args: readonly string[],
  options: SpawnOptions,
): Child {
  const pinned = options.core !== undefined && TASKSET !== undefined;
  const file = pinned ? (TASKSET as string) : command;
  const argv = pinned ? ['-c', String(options.core), command, ...args] : [...args];
  const stdio: ('ignore' | 'inherit' | 'pipe' | 'ipc' | number)[] = [
    'ignore',
    options.stdout ?? 'ignore',
    'pipe',
  ];
  if (options.ipc) stdio.push('ipc');
  const child = new Child(
    name,
    spawn(file, argv, { stdio, env: options.env ?? process.env, cwd: options.cwd }),
    pinned ? options.core : undefined,
    (exited, code) => unexpectedExitHandler(exited, code),
  );
  live.add(child);
  return child;
}

/** Pins this process (all its threads: -a) to `core`, so the orchestrator stays off the measured core. */
export function pinSelf(core: number): boolean {
  if (!TASKSET) return false;
  try {
    execFileSync(TASKSET, ['-a', '-p', '-c', String(core), String(process.pid)], {
      stdio: 'ignore',
    });
    return true;
  } catch {
    return false;
  }
}

/** Stops every child still running, in parallel. */
export async function stopAllChildren(graceMs = 5_000): Promise<void> {
  await Promise.all([...live].map((child) => child.stop(graceMs)));
}

/** Last-resort, synchronous: SIGKILL whatever is left (used from process 'exit'). */
export function killAllChildrenNow(): void {
  for (const child of live) {
    try {
      child.process.kill('SIGKILL');
    } catch {
      // already gone
    }
  }
}

/** Waits for the child's first IPC message of the given type (helpers send {type:'ready', ...}). */
export function waitForMessage<T extends { type: string }>(
  child: Child,
  type: string,
  timeoutMs: number,
): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      cleanup();
      reject(
        new Error(`${child.name} sent no "${type}" within ${timeoutMs} ms\n${child.stderr()}`),
      );
    }, timeoutMs);
    const onMessage = (message: unknown): void => {
      const typed = message as { type?: unknown; error?: unknown };
      if (typed?.type === 'error') {
        cleanup();
        reject(new Error(`${child.name}: ${String(typed.error)}`));
      } else if (typed?.type === type) {
        cleanup();
        resolve(message as T);
      }
    };
    const onExit = (code: number | null): void => {
      cleanup();
      reject(new Error(`${child.name} exited (${code}) before "${type}"\n${child.stderr()}`));
    };
    const cleanup = (): void => {
      clearTimeout(timer);
      child.process.off('message', onMessage);
      child.process.off('exit', onExit);
    };
    child.process.on('message', onMessage);
    child.process.once('exit', onExit);
  });
}
