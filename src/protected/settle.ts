// Settling a claim once its forward is over (README.md#what-a-client-sees-on-a-protected-route):
// complete it with the answer, release it so a retry runs, or — after a transport failure — release
// it when nothing reached the upstream, else record an unknown outcome as the route says
// (`unknownOutcome`).
import type { RecordId, StoredResponse } from '../store/record';
import type { TransportFailure } from '../upstream/transport-errors';
import { afterUnknownOutcome, type Answer, problem, unknownOutcomeResponse } from './answer';
import type { ProtectedDeps, ProtectedRequest } from './context';
import type { Leader } from './local-keys';
import { noteOutcome, respond } from './respond';
import { bestEffortStoreCall } from './store-call';

/**
 * Completes the record with `stored`. If the store fails the upstream has still acted: the client
 * gets its answer, and the claim stays in progress until its lease ends (then unknownOutcome
 * decides). Not cached here: most keys are never repeated; the first repeat admits it.
 */
export async function completeRecord(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  id: RecordId,
  fence: string,
  stored: StoredResponse,
  leader: Leader | undefined,
): Promise<void> {
  const completed = await bestEffortStoreCall(deps, request, 'complete', () =>
    deps.store.complete(id, fence, stored, request.policy.ttlMs),
  );
  if (completed) leader?.settle({ kind: 'stored', response: stored });
}

/** Drops the claim so a retry executes again; a store failure leaves it to its lease. */
export async function releaseRecord(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  id: RecordId,
  fence: string,
): Promise<void> {
  await bestEffortStoreCall(deps, request, 'release', () => deps.store.release(id, fence));
}

/**
 * After a transport failure: release if nothing was sent; else store or keep the unknown outcome.
 * The client gets the answer unless it already has the head of the upstream's (`clientAnswered`).
 */
export async function settleFailure(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  id: RecordId,
  fence: string,
  failure: TransportFailure,
  leader: Leader | undefined,
  clientAnswered = false,
): Promise<void> {
  const answer = await settleFailed(deps, request, id, fence, failure, leader);
  if (clientAnswered) noteOutcome(request, answer);
  else respond(request, answer);
}

async function settleFailed(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  id: RecordId,
  fence: string,
  failure: TransportFailure,
  leader: Leader | undefined,
): Promise<Answer> {
  const { policy } = request;
  if (!failure.sent) {
    await releaseRecord(deps, request, id, fence);
    return problem('upstream_error', failure.error);
  }
  const unknown = unknownOutcomeResponse(request, afterUnknownOutcome(failure.error, policy));
  // At most once: under `fail` this answer is what every repeat gets until an operator clears the
  // key. Under `retry` the claim stays in progress; a repeat takes it over once the lease ends.
  if (policy.unknownOutcome === 'fail')
    await completeRecord(deps, request, id, fence, unknown, leader);
  // Shadow mode answers as a pass-through route would: the same 502/504, without our marker.
  if (!policy.enforce) {
    request.log.outcomeUnknown = true;
    return problem('upstream_error', failure.error);
  }
  return { kind: 'unknown-outcome', stored: unknown };
}
