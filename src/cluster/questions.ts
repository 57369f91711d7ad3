// The primary asking every live worker the same question (its metrics, its console counters, to
// reload, to forget a cleared record) and gathering the answers. A worker that exits, or does not
// answer within the deadline, is reported as such instead of holding the others' answers back.
import type { Worker } from 'node:cluster';
import { isFromWorker, messageType, type Question, type ToWorker } from './messages';

export interface Answer {
  readonly workerId: number;
  readonly pid: number | undefined;
  readonly value?: unknown;
  /** Why there is no value: the worker's error, or that it exited or did not answer in time. */
  readonly error?: string;
  /** It exited before answering (so it holds nothing the question was about any more). */
  readonly exited?: true;
}

interface Pending {
  readonly answers: Map<number, Answer>;
  readonly waitingFor: Map<number, Worker>;
  readonly done: () => void;
}

export class WorkerQuestions {
  private nextId = 0;
  private readonly pending = new Map<number, Pending>();

  /** Asks each of `workers`; resolves once all answered, exited, or `timeoutMs` passed. */
  ask(workers: readonly Worker[], question: Question, timeoutMs: number): Promise<Answer[]> {
    const id = this.nextId++;
    const asked = workers.filter((worker) => worker.isConnected());
    const timeoutText = `no answer within ${timeoutMs} ms`;
    return new Promise((resolve) => {
      const pending: Pending = {
        answers: new Map(),
        waitingFor: new Map(asked.map((worker) => [worker.id, worker])),
        done: () => {
          clearTimeout(timer);
          this.pending.delete(id);
          for (const worker of pending.waitingFor.values())
            pending.answers.set(worker.id, answerOf(worker, { error: timeoutText }));
          resolve(asked.map((worker) => pending.answers.get(worker.id)!));
        },
      };
      const timer = setTimeout(() => pending.done(), timeoutMs);
      this.pending.set(id, pending);
      const message: ToWorker = { type: messageType.ask, id, question };
      for (const worker of asked) worker.send(message);
      if (asked.length === 0) pending.done();
    });
  }

  /** Every message from a worker passes here (cluster's 'message' event). */
  received(worker: Worker, message: unknown): void {
    if (!isFromWorker(message) || message.type !== messageType.answer) return;
    const pending = this.pending.get(message.id);
    if (!pending?.waitingFor.delete(worker.id)) return;
    pending.answers.set(
      worker.id,
      answerOf(
        worker,
        message.error === undefined ? { value: message.value } : { error: message.error },
      ),
    );
    if (pending.waitingFor.size === 0) pending.done();
  }

  /** A worker exited: it will not answer what it was asked. */
  exited(worker: Worker): void {
    for (const pending of [...this.pending.values()]) {
      if (!pending.waitingFor.delete(worker.id)) continue;
      pending.answers.set(
        worker.id,
        answerOf(worker, { error: 'it exited before answering', exited: true }),
      );
      if (pending.waitingFor.size === 0) pending.done();
    }
  }
}

function answerOf(
  worker: Worker,
  result: { value?: unknown; error?: string; exited?: true },
): Answer {
  return { workerId: worker.id, pid: worker.process.pid, ...result };
}
