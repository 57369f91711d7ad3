// A repeat of a key this process is already working on, answered from what its first request
// learnt (local-keys.ts) instead of the store: the answer for each verdict, and the lookup of a large
// body by its raw fingerprint (the replay cache, then the leader) before any canonical JSON.
import { performance } from 'node:perf_hooks';
import { fail, inFlight, replay, reused, storeUnavailableError } from './answers';
import type { ProtectedDeps, ProtectedRequest } from './protected-context';
import { type RecordId, recordText } from './record';
import { clientGone } from './wait-for-change';

/**
 * A large body's repeat answered without its canonical fingerprint: from the replay cache, or from
 * this process's first request of the key, when either has seen exactly these bytes.
 */
export async function answeredByRaw(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  id: RecordId,
  raw: Buffer,
): Promise<boolean> {
  const cached = deps.cache?.lookupRaw(id, raw);
  if (cached) {
    request.log.cached = true;
    replay(request, cached);
    return true;
  }
  if (deps.localKeys === undefined) return false;
  return (await followLeader(deps, request, id, undefined, raw)) === undefined;
}

/**
 * Answers a repeat from what this process's first request of its key learnt (local-keys.ts), or
 * returns what to do when that does not answer it: claim, after trying to lead (`lead`) or not.
 */
export async function followLeader(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  id: RecordId,
  fingerprint: Buffer | undefined,
  raw: Buffer | undefined,
): Promise<{ readonly lead: boolean } | undefined> {
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
    deps.cache?.count(id, verdict.kind === 'replay', text);
  }
  switch (verdict.kind) {
    case 'replay':
      replay(request, verdict.response);
      break;
    case 'mismatch':
      reused(request, id.key);
      break;
    case 'in-flight':
    case 'too-many-waiters':
      inFlight(request, id.key, verdict.leaseRemainingMs);
      break;
    case 'store-down':
      fail(request, 'store_unavailable', storeUnavailableError(request, undefined));
      break;
    case 'client-gone':
      log.outcome = 'client_gone';
      break;
    case 'ask-store':
      return verdict;
  }
  return undefined;
}
