// The primary's workers: forked, handed what they need to serve, counted while they listen, replaced
// when one exits on its own (after RespawnPolicy's backoff, and not in an endless loop), and drained
// together. node:cluster's default scheduling is kept: on Linux the primary accepts each connection
// and hands it to the workers in turn (round robin), which spreads connections evenly; the
// alternative (every worker accepting on the shared socket) leaves the kernel to choose, and it
// favours a few busy processes. NODE_CLUSTER_SCHED_POLICY=none selects it all the same.
import cluster, { type Worker } from 'node:cluster';
import type { Logger } from 'pino';
import { StartupError } from '../startup-error';
import { isFromWorker, messageType, type ToWorker } from './messages';
import { WorkerQuestions } from './questions';
import { MAX_EXITS, RespawnPolicy, WINDOW_MS } from './respawn-policy';

/** After the grace period, how long drained workers get to close before they are killed. */
const DRAIN_MARGIN_MS = 5_000;

export interface SupervisorOptions {
  readonly count: number;
  /**
   * What a worker is told when it says hello: the URL and the config text in force now. `slot`
   * (0 to count-1) is its place, kept by the worker that replaces it (its spool is the slot's).
   */
  readonly start: (
    slot: number,
  ) => Omit<Extract<ToWorker, { type: typeof messageType.start }>, 'type'>;
  readonly logger: Logger;
}

interface Slot {
  readonly worker: Worker;
  readonly index: number;
  listening: boolean;
  draining: boolean;
}

export class WorkerSupervisor {
  readonly questions = new WorkerQuestions();
  private readonly slots = new Map<number, Slot>();
  private readonly policy = new RespawnPolicy();
  private stopping = false;
  private giveUp!: (error: Error) => void;
  /** Rejects when workers keep exiting (RespawnPolicy) or a worker cannot start: stop serving. */
  readonly failed = new Promise<never>((_, reject) => (this.giveUp = reject));
  private onListening: (() => void) | undefined;
  /** Every first worker listened once: from then on an exit is replaced, not fatal. */
  private started = false;

  constructor(private readonly options: SupervisorOptions) {
    this.failed.catch(() => undefined); // awaited by the primary; until then not unhandled
    cluster.on('message', (worker, message: unknown) => this.received(worker, message));
  }

  /** Forks every worker; resolves once all listen, rejects with the first one's startup error. */
  async startAll(): Promise<void> {
    const listening = new Promise<void>((resolve) => (this.onListening = resolve));
    for (let i = 0; i < this.options.count; i++) this.fork(i);
    await Promise.race([listening, this.failed]);
    this.started = true;
  }

  /** Workers that listen now: the ones asked questions. */
  serving(): Worker[] {
    return [...this.slots.values()].filter((slot) => slot.listening).map((slot) => slot.worker);
  }

  status(): { configured: number; serving: number } {
    return { configured: this.options.count, serving: this.serving().length };
  }

  /**
   * Tells every worker to drain (its requests, then its pending writes: up to graceMs in all), and
   * resolves once all exited: true if each exited 0. One still running DRAIN_MARGIN_MS after the
   * grace is killed.
   */
  async drain(graceMs: number): Promise<boolean> {
    this.stopping = true;
    const exits = [...this.slots.values()].map((slot) => {
      slot.draining = true;
      return exitOf(slot.worker);
    });
    for (const slot of this.slots.values()) sendTo(slot.worker, { type: messageType.drain });
    const overdue = setTimeout(() => {
      for (const { worker } of this.slots.values()) {
        this.options.logger.warn(
          { workerPid: worker.process.pid },
          'worker still running after the grace period; killing it',
        );
        worker.process.kill('SIGKILL');
      }
    }, graceMs + DRAIN_MARGIN_MS);
    const codes = await Promise.all(exits);
    clearTimeout(overdue);
    return codes.every((code) => code === 0);
  }

  /** A second signal: no waiting. */
  killAll(): void {
    this.stopping = true;
    for (const { worker } of this.slots.values()) worker.process.kill('SIGKILL');
  }

  private fork(index: number): void {
    const worker = cluster.fork();
    this.slots.set(worker.id, { worker, index, listening: false, draining: false });
    worker.on('exit', (code: number | null, signal: NodeJS.Signals | null) =>
      this.exited(worker, code, signal),
    );
  }

  private received(worker: Worker, message: unknown): void {
    if (!isFromWorker(message)) return;
    const slot = this.slots.get(worker.id);
    if (!slot) return;
    this.questions.received(worker, message);
    switch (message.type) {
      case messageType.hello:
        if (slot.draining || this.stopping) sendTo(worker, { type: messageType.drain });
        else sendTo(worker, { type: messageType.start, ...this.options.start(slot.index) });
        return;
      case messageType.listening:
        slot.listening = true;
        this.options.logger.debug(
          { workerPid: worker.process.pid, worker: worker.id },
          'worker serving',
        );
        if (this.serving().length === this.options.count) this.onListening?.();
        return;
      case messageType.failed:
        this.failedToStart(worker, message);
        return;
      default:
    }
  }

  private failedToStart(worker: Worker, message: { message: string; exitCode: 1 | 2 }): void {
    // Before the cluster first served, a worker that cannot start (a port in use) stops it all, in
    // the worker's own words. Later it is one exit among others, for the respawn policy.
    if (!this.started) {
      this.giveUp(new StartupError(message.message, { exitCode: message.exitCode }));
      return;
    }
    this.options.logger.error(
      { workerPid: worker.process.pid, reason: message.message },
      'a new worker could not start',
    );
  }

  private exited(worker: Worker, code: number | null, signal: NodeJS.Signals | null): void {
    const slot = this.slots.get(worker.id);
    this.slots.delete(worker.id);
    this.questions.exited(worker);
    if (this.stopping || slot?.draining) return;
    const how = signal === null ? `exit code ${code}` : `signal ${signal}`;
    if (!this.started) {
      this.giveUp(
        new StartupError(`a worker exited while starting (${how}): read the lines above`),
      );
      return;
    }
    const decision = this.policy.afterExit();
    if (!decision.respawn) {
      this.options.logger.error(
        { workerPid: worker.process.pid, code, signal, exits: decision.recentExits },
        `worker (PID ${worker.process.pid}) exited (${how}); ${decision.recentExits} exits within ${WINDOW_MS / 1000} s, giving up`,
      );
      this.giveUp(
        new StartupError(
          `workers keep exiting (more than ${MAX_EXITS} within ${WINDOW_MS / 1000} s, the last with ${how}): read the log lines above for why, fix it and start the proxy again`,
        ),
      );
      return;
    }
    this.options.logger.error(
      { workerPid: worker.process.pid, code, signal, restartInMs: decision.delayMs },
      `worker (PID ${worker.process.pid}) exited unexpectedly (${how}); starting another in ${decision.delayMs} ms`,
    );
    setTimeout(() => {
      if (!this.stopping && slot) this.fork(slot.index);
    }, decision.delayMs);
  }
}

function sendTo(worker: Worker, message: ToWorker): void {
  if (worker.isConnected()) worker.send(message);
}

function exitOf(worker: Worker): Promise<number | null> {
  if (worker.process.exitCode !== null || worker.process.signalCode !== null)
    return Promise.resolve(worker.process.exitCode);
  return new Promise((resolve) => worker.once('exit', (code: number | null) => resolve(code)));
}
