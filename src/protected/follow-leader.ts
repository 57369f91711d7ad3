// A repeat of a key this process is already working on, answered from what its first request
// learnt (local-keys.ts) instead of the store: the answer for each verdict, and the lookup of a large
// body by its raw fingerprint (the replay cache, then the leader) before any canonical JSON.
import { performance } from 'node:perf_hooks';
import { type RecordId, recordText } from '../store/record';
import { type Answer, CLIENT_GONE, inFlight, problem, replayOf, reused } from './answer';
import type { ProtectedDeps, ProtectedRequest } from './context';
import { storeUnavailableError } from './store-call';
import { clientGone } from './wait-for-change';

/** The leader learnt nothing that answers this repeat: claim (after trying to lead, or not). */
export interface AskStore {
  readonly kind: 'ask-store';
  readonly lead: boolean;
}

/**
 * A large body's repeat answered without its canonical fingerprint: from the replay cache, or from
 * this process's first request of the key, when either has seen exactly these bytes.
 */
export async function answerByRaw(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  id: RecordId,
  raw: Buffer,
): Promise<Answer | undefined> {
  const cached = deps.store.replayByRaw(id, raw);
  if (cached) {
    request.log.cached = true;
    return replayOf(cached);
  }
  if (deps.localKeys === undefined) return undefined;
  const followed = await followLeader(deps, request, id, undefined, raw);
  return followed.kind === 'ask-store' ? undefined : followed;
}

/**
 * The answer to a repeat from what this process's first request of its key learnt (local-keys.ts),
 * or what to do when that does not answer it.
 */
export async function followLeader(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  id: RecordId,
  fingerprint: Buffer | undefined,
  raw: Buffer | undefined,
): Promise<Answer | AskStore> {
  const { policy, log } = request;
  const text = recordText(id);
  const waitStarted = performance.now();
  const verdict = await deps.localKeys!.follow(text, {
    fingerprint,
    raw,
    mode: policy.onConcurrent,
    deadline: waitStarted + policy.waitTimeoutMs,
    maxWaiters: policy.maxWaitersPerKey,
    gone: clientGone(request.res),
    leaseMs: policy.lockTimeoutMs,
  });
  log.waitMs += performance.now() - waitStarted;
  if (verdict.kind !== 'ask-store' && verdict.kind !== 'client-gone') {
    log.coalesced = true;
    deps.store.countAnswered(id, verdict.kind === 'replay', text);
  }
  const route = request.route.name;
  switch (verdict.kind) {
    case 'replay':
      return replayOf(verdict.response);
    case 'mismatch':
      return reused(route, id.key, request.mcp !== undefined);
    case 'in-flight':
    case 'too-many-waiters':
      return inFlight(route, id.key, verdict.leaseRemainingMs);
    case 'store-down':
      return problem('store_unavailable', storeUnavailableError(request, undefined));
    case 'client-gone':
      return CLIENT_GONE;
    case 'ask-store':
      return verdict;
  }
}
