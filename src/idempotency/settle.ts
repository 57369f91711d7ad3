// Settling a claim once its forward is over (SPEC §4): complete it with the answer, release it so a
// retry runs, or — after a transport failure — release it when nothing reached the upstream, else
// record an unknown outcome as the route says (`unknownOutcome`).
import type { TransportFailure } from '../upstream/transport-errors';
import { sendError, sendUnknownOutcome, storeCall, unknownOutcomeResponse } from './answers';
import type { Leader } from './local-keys';
import type { ProtectedDeps, ProtectedRequest } from './protected-context';
import type { RecordId, StoredResponse } from './record';

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
  const completed = await storeCall(
    deps,
    request,
    'complete',
    () => deps.store.complete(id, fence, stored, request.policy.ttlMs),
    false,
  );
  if (completed === true) leader?.settle({ kind: 'stored', response: stored });
}

/** Drops the claim so a retry executes again; a store failure leaves it to its lease. */
export async function releaseRecord(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  id: RecordId,
  fence: string,
): Promise<void> {
  await storeCall(deps, request, 'release', () => deps.store.release(id, fence), false);
}

/** After a transport failure: release if nothing was sent; else store or keep the unknown outcome. */
export async function settleFailure(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  id: RecordId,
  fence: string,
  failure: TransportFailure,
  leader: Leader | undefined,
  clientAlreadyAnswered = false,
): Promise<void> {
  const { policy } = request;
  request.log.outcome = 'upstream_error';
  if (!failure.sent) {
    await releaseRecord(deps, request, id, fence);
    if (!clientAlreadyAnswered) sendError(request, failure.error);
    return;
  }
  const unknown = unknownOutcomeResponse(request, failure.error);
  request.log.outcomeUnknown = true;
  if (policy.unknownOutcome === 'fail') {
    // At most once: this answer is what every repeat gets until an operator clears the key.
    await completeRecord(deps, request, id, fence, unknown, leader);
  }
  // Under `retry` the claim stays in progress; a repeat takes it over once the lease ends.
  if (clientAlreadyAnswered) return;
  // Shadow mode answers as a pass-through route would: the same 502/504, without our marker.
  if (!policy.enforce) sendError(request, failure.error);
  else sendUnknownOutcome(request, unknown);
}
