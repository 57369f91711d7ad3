// Long calls answered with a handle instead of a wait (docs/long-calls.md): an HTTP 202 with a
// status monitor, an MCP task. The protocol says which calls may be deferred and how a handle and a
// poll's answer are written; the engine decides when, keeps the handle in the call's record, and
// reads it back for a poll on any instance.
//
//   forward ─ upstream not done within `after` ─► open the record's handle (while the call runs:
//             in progress, its lease on) ─► the client gets the handle; the answer is captured and
//             stored as for a client that left; where calls can be cancelled, the handle is read
//             every cancelCheckMs, and a cancel asked for stops the call upstream
//   repeat of a running call that may join it ─► the same handle (opened by whichever came first)
//   poll ─► the record (its scope from the route, its tenant from the poller) ─► the secret must
//           match ─► running │ done: the stored answer │ abandoned: settled as an unknown outcome
//           where the route stores one for good, else reported as one
import { randomBytes, timingSafeEqual } from 'node:crypto';
import type {
  AnswerReceiver,
  Call,
  Outcome,
  Poll,
  ProtectedDeps,
  ProtectedRequest,
  ProtocolAdapter,
} from './protocol';
import type { Handle, HandleState } from '../store/handles';
import { leaseEndedUnknown } from './problems';
import { StoreUnavailable, storeCall, storeUnavailableError } from './store-call';

/** True when `secret` is the handle's, compared in constant time. */
function sameSecret(handle: Handle, secret: string): boolean {
  const a = Buffer.from(handle.secret);
  const b = Buffer.from(secret);
  return a.length === b.length && timingSafeEqual(a, b);
}

/** A forward that may be answered with a handle: started with it, stopped when the forward ends. */
export interface Deferring {
  /** True once the client was answered with the handle. */
  readonly deferred: boolean;
  stop(): void;
}

/**
 * Answers the call with its handle once `after` passes without the upstream's answer, unless the
 * client has had part of it (a stream), the record is settled, or the client left. Where calls
 * can be cancelled, the handle is opened even for a client that left (its retry joins the call and
 * may cancel it), and watched for a cancel until the forward ends; `cancel` stops the call upstream.
 */
export function deferLater<C extends Call>(
  deps: ProtectedDeps,
  protocol: ProtocolAdapter<C>,
  request: ProtectedRequest,
  call: C,
  receiver: AnswerReceiver,
  cancel: (reason: Error) => void,
): Deferring | undefined {
  const deferral = call.deferral;
  if (deferral === undefined || !canDefer(deps, protocol)) return undefined;
  let stopped = false;
  let deferred = false;
  let watch: NodeJS.Timeout | undefined;
  const answerable = (): boolean =>
    !stopped && !receiver.streaming && !receiver.settled && !request.res.destroyed;
  const watchForCancel = (everyMs: number): void => {
    watch = setTimeout(() => {
      deps.handles!.read(call.id).then(
        (found) => {
          if (stopped) return;
          if (found?.kind === 'running' && found.handle.cancelRequested)
            cancel(new CallCancelled());
          else if (found?.kind === 'running') watchForCancel(everyMs);
        },
        () => !stopped && watchForCancel(everyMs),
      );
    }, everyMs);
  };
  const timer = setTimeout(() => {
    const cancelCheckMs = deferral.cancelCheckMs;
    if (cancelCheckMs === undefined ? !answerable() : stopped || receiver.settled) return;
    openHandle(deps, request, call).then((handle) => {
      if (handle === null || stopped) return;
      if (cancelCheckMs !== undefined) watchForCancel(cancelCheckMs);
      if (!answerable()) return;
      deferred = true;
      receiver.detach();
      protocol.deferred!(request, call, handle);
    }, noHandle);
  }, deferral.afterMs);
  return {
    get deferred() {
      return deferred;
    },
    stop() {
      stopped = true;
      clearTimeout(timer);
      clearTimeout(watch);
    },
  };
}

/** True when calls may be answered with handles here: the store keeps them, the protocol writes them. */
export function canDefer<C extends Call>(
  deps: ProtectedDeps,
  protocol: ProtocolAdapter<C>,
): boolean {
  return deps.handles !== undefined && protocol.deferred !== undefined;
}

/** Why a call's upstream request was stopped: a client asked to cancel it (an MCP tasks/cancel). */
export class CallCancelled extends Error {
  constructor() {
    super('the call was cancelled by its client');
    this.name = 'CallCancelled';
  }
}

/** The store failed to open a handle: the client keeps waiting for the answer itself (logged). */
const noHandle = (): void => undefined;

/**
 * The record's handle, new or the one it has, while its call runs; null when it no longer does.
 * Throws StoreUnavailable.
 */
export function openHandle(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  call: Call,
): Promise<Handle | null> {
  const secret = randomBytes(18).toString('base64url');
  return storeCall(deps, request, 'open handle', () => deps.handles!.open(call.id, secret));
}

/**
 * Answers a poll of a handle: what its record says, to the poller whose route and credentials find
 * it and whose token carries its secret; a cancel asks for the call to stop first.
 */
export async function answerPoll(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  poll: Poll,
): Promise<Outcome> {
  const outcome: Outcome = { label: 'polled', key: poll.id.key };
  const { res } = request;
  if (deps.handles === undefined) {
    poll.answer(res, undefined);
    return outcome;
  }
  try {
    let found = await findHandle(deps, request, poll);
    if (found?.kind === 'abandoned') found = await settleAbandoned(deps, request, poll, found);
    // A cancel of a call still running is asked for in its record: the proxy running it, wherever
    // it is, sees it at its next look and stops the call upstream.
    if (poll.cancel === true && found?.kind === 'running')
      await storeCall(deps, request, 'cancel', () =>
        deps.handles!.requestCancel(poll.id, poll.secret),
      );
    poll.answer(res, found);
    return outcome;
  } catch (error) {
    if (!(error instanceof StoreUnavailable)) throw error;
    poll.fail(res, storeUnavailableError(request, poll.id.key, error.cause));
    return { ...outcome, label: 'store_unavailable' };
  }
}

async function findHandle(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  poll: Poll,
): Promise<HandleState | undefined> {
  const found = await storeCall(deps, request, 'poll', () => deps.handles!.read(poll.id));
  return found !== undefined && sameSecret(found.handle, poll.secret) ? found : undefined;
}

/**
 * A call whose claim's lease ended unanswered (the proxy running it stopped). Where the route stores
 * an unknown outcome for good (unknownOutcome: fail, no reconcile) it is settled now, as a retry
 * would settle it; elsewhere a retry decides (runs it again, or asks the upstream), and the poll
 * reports the unknown outcome that a retry would resolve.
 */
async function settleAbandoned(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  poll: Poll,
  found: Extract<HandleState, { kind: 'abandoned' }>,
): Promise<HandleState | undefined> {
  const { id } = poll;
  const { policy } = request;
  const unknown = poll.unknownOutcome(leaseEndedUnknown(request.route.name, id.key, policy));
  if (policy.unknownOutcome !== 'fail' || policy.reconcile !== null)
    return { kind: 'done', handle: found.handle, response: unknown, completedAt: Date.now() };
  const settled = await storeCall(deps, request, 'settle unknown', () =>
    deps.store.settleUnknown(id, found.fence, unknown, policy.ttlMs),
  );
  // Settled by someone else meanwhile (a retry): read what it became.
  if (settled === null) return findHandle(deps, request, poll);
  return { kind: 'done', handle: found.handle, response: settled, completedAt: Date.now() };
}
