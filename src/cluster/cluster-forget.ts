// A clear on a cluster's admin listener (the primary's, which has no replay cache of its own): every
// serving worker is asked to drop the record from its replay cache, and the clear answers once each
// confirmed or exited, so no repeat sent after the answer is replayed the cleared record from a
// worker's memory. The clear's NOTIFY would get there too, but after the answer when a worker is
// busy: that race is what this closes on the clearing proxy (other hosts still rely on the NOTIFY).
// A worker starting meanwhile is not asked: its cache is empty, and it reads the table only after
// the DELETE committed.
import type { WorkersForgot } from '../admin/admin-deps';
import { recordDigest, type RecordId } from '../store/record';
import type { Question } from './messages';
import type { Answer } from './questions';

/**
 * How long a clear waits for a worker: an IPC round trip takes well under a millisecond, so a worker
 * that has not answered in this time is stuck (a long event-loop stall, SIGSTOP); the clear answers
 * without it rather than hang, and says so.
 */
export const FORGET_TIMEOUT_MS = 3_000;

export function clusterForget(
  ask: (question: Question, timeoutMs: number) => Promise<Answer[]>,
): (ids: readonly RecordId[]) => Promise<WorkersForgot> {
  return async (ids) => {
    // One question for every record of a clear: one round trip per worker, however many.
    const answers = await ask(
      { what: 'forget', digests: ids.map(recordDigest) },
      FORGET_TIMEOUT_MS,
    );
    const unconfirmed = answers.flatMap(({ pid, error, exited }) =>
      error === undefined || exited ? [] : [{ workerPid: pid, reason: error }],
    );
    return { asked: answers.length, forgot: answers.length - unconfirmed.length, unconfirmed };
  };
}
