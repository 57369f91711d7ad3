// Keeps the embedded PostgreSQL running while `serve` uses it, as a service manager would: a
// postmaster that exits on its own (kill -9, the OOM killer, a crash) is noticed through its exit
// event (it is our child, detached or not), said once, and started again on the same data directory
// with backoff. PostgreSQL itself handles the postmaster.pid a killed server leaves behind: it
// checks that no process still uses the old shared memory, which is why a first retry can fail and
// the next one succeed. Restarts that keep failing end the proxy instead of serving 503s forever.
import type { ChildProcess } from 'node:child_process';

export type EmbeddedState = 'running' | 'restarting' | 'stopped' | 'failed';

export interface EmbeddedStatus {
  readonly state: EmbeddedState;
  /** The postmaster's PID while running. */
  readonly pid: number | undefined;
  /** Successful restarts since the proxy started it. */
  readonly restarts: number;
  /** Why it last exited on its own (`signal SIGKILL`, `code 1`). */
  readonly lastExit: string | undefined;
}

export interface SupervisorEvents {
  /** The server exited without being asked to. */
  exited(pid: number, reason: string): void;
  restarted(pid: number, restarts: number): void;
  /** One restart failed; the next is in `retryInMs`. */
  restartFailed(error: Error, attempt: number, retryInMs: number): void;
  /** `maxAttempts` restarts in a row failed: nothing more is tried. */
  gaveUp(error: Error, attempts: number): void;
}

export interface SupervisorOptions {
  /** Starts the server on the same data directory and port; resolves once it accepts connections. */
  readonly start: () => Promise<ChildProcess>;
  readonly events: SupervisorEvents;
  readonly maxAttempts?: number;
  readonly initialDelayMs?: number;
  readonly maxDelayMs?: number;
}

export const RESTART_ATTEMPTS = 5;

export class ServerSupervisor {
  private child: ChildProcess | undefined;
  private current: EmbeddedState = 'stopped';
  private restartCount = 0;
  private lastExit: string | undefined;
  private stopping = false;
  /** The restart loop, while one runs: stop() waits for it. */
  private restarting: Promise<void> | undefined;
  private wake: (() => void) | undefined;

  constructor(private readonly options: SupervisorOptions) {}

  status(): EmbeddedStatus {
    return {
      state: this.current,
      pid: this.current === 'running' ? this.child?.pid : undefined,
      restarts: this.restartCount,
      lastExit: this.lastExit,
    };
  }

  /** Watches `child`, the server just started. */
  watch(child: ChildProcess): void {
    this.child = child;
    this.current = 'running';
    this.stopping = false;
    child.once('exit', (code, signal) => {
      if (this.child !== child || this.stopping) return;
      const reason = signal ? `signal ${signal}` : `code ${code}`;
      this.lastExit = reason;
      this.current = 'restarting';
      this.options.events.exited(child.pid ?? 0, reason);
      this.restarting = this.restartLoop().finally(() => (this.restarting = undefined));
    });
  }

  /**
   * Stops watching and returns the server to stop, or undefined when none runs (it died and was not
   * restarted): then there is nothing to stop, and nothing to claim stopped.
   */
  async release(): Promise<ChildProcess | undefined> {
    this.stopping = true;
    this.wake?.();
    await this.restarting;
    const child = this.child;
    this.child = undefined;
    const alive = child !== undefined && child.exitCode === null && child.signalCode === null;
    if (this.current !== 'failed') this.current = 'stopped';
    return alive ? child : undefined;
  }

  private async restartLoop(): Promise<void> {
    const max = this.options.maxAttempts ?? RESTART_ATTEMPTS;
    const maxDelay = this.options.maxDelayMs ?? 5_000;
    let delay = this.options.initialDelayMs ?? 200;
    for (let attempt = 1; ; attempt++) {
      await this.pause(delay);
      if (this.stopping) return;
      try {
        const child = await this.options.start();
        this.restartCount++;
        this.watch(child);
        if (this.stopping) return; // release() stops it
        this.options.events.restarted(child.pid ?? 0, this.restartCount);
        return;
      } catch (error) {
        if (this.stopping) return;
        if (attempt >= max) {
          this.current = 'failed';
          this.options.events.gaveUp(error as Error, attempt);
          return;
        }
        delay = Math.min(delay * 2, maxDelay);
        this.options.events.restartFailed(error as Error, attempt, delay);
      }
    }
  }

  /** Sleeps `ms`, or less when release() is called meanwhile. */
  private pause(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.wake = undefined;
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.wake = done;
    });
  }
}
