// One protected request, whatever its protocol (docs/record-lifecycle.md):
//
//   read the call ─┬─ the replay cache knows it: replay or 422, in the same turn ───────────► Outcome
//   (adapter)      └─ claim ─► decide ─┬─ answer: replay, 422, 409, 503 ──────────────────► Outcome
//                     (store)  (pure)  ├─ attach: join the stream the key's first request runs here
//                                      ├─ wait / take over / settle unknown ─► claim again, or answer
//                                      └─ forward ─► settle: complete, release, or unknown ─► Outcome
//
// Most of what agents retry is a repeat of an answer this process already holds: it is answered in
// the turn its call is read (answerNow: for REST, inside the body's 'end' event), with no claim, no
// promise and no Claimant. The rest takes the store's way, the one truth for everything else.
//
// The route's protocol adapter (protocol.ts: REST, MCP or A2A) reads the request into a verdict
// and writes the answers; this file forwards what it passes and what it protects; the
// store (store/coalescing-store.ts) answers what memory can; decide.ts says what a claim means.
// What happened comes back as one Outcome, from which the app writes the request's log line.
//
// The response is stored before the client sees its last byte, so once a client has a whole answer,
// every retry replays it. A store failure before the forward is a 503 (fail closed), or in shadow
// mode a forward anyway; after it, the client still gets the upstream's answer: the store keeps
// sending a failed completion or release in the background (it says `queued`), and one it gives up
// on leaves the claim to its lease. There is no retry loop here: the store owns its writes.
import { AsyncResource } from 'node:async_hooks';
import { performance } from 'node:perf_hooks';
import {
  Claimant,
  type ClaimRequest,
  type ClaimResult,
  type Landing,
  type RecordId,
} from '../store/record';
import { LiveAnswer } from '../store/live-answer';
import { type ClaimDecision, decide, MAX_RACES, type Settlement } from './decide';
import { forwardUnstored, passOn, sendUpstream, transportFailure } from './outgoing';
import {
  afterUnknownOutcome,
  cancelledCall,
  inFlight,
  leaseEndedUnknown,
  reused,
} from './problems';
import {
  type Call,
  type Outcome,
  type ProtectedDeps,
  type ProtectedRequest,
  type ProtocolAdapter,
  UnreadableCall,
  type Verdict,
} from './protocol';
import { readPrincipal } from './principal';
import { keepForProbe, keepOnceLanded, reconcileReplay, reconciles } from './reconcile-step';
import { answerPoll, CallCancelled, canDefer, deferLater, openHandle } from './long-calls';
import {
  claimCall,
  settleStoreCall,
  storeCall,
  StoreUnavailable,
  storeUnavailableError,
} from './store-call';

/** Where a protected request's end goes: what became of it, or an error nobody expected. */
export interface Ending {
  finished(outcome: Outcome): void;
  failed(error: unknown): void;
}

/**
 * Serves one protected request to its `ending`. A repeat that memory answers is answered in the
 * turn its call is read (for REST, the turn its body ended) with no promise on its way: the replay
 * cache's answer, matched by the body's bytes, written at once. Everything else goes on through the
 * store (afterRead).
 */
export function serveProtected<C extends Call>(
  deps: ProtectedDeps,
  protocol: ProtocolAdapter<C>,
  request: ProtectedRequest,
  ending: Ending,
): void {
  if (request.policy.tenantClaims.length === 0) return readCall(deps, protocol, request, ending);
  // A route scoped by a token's claim verifies it first: a refusal ends the request unread.
  readPrincipal(deps, request).then((refused) => {
    if (refused === undefined) readCall(deps, protocol, request, ending);
    else takeVerdict(deps, protocol, request, refused, ending);
  }, ending.failed);
}

/** Has the protocol read the call, and takes its verdict. */
function readCall<C extends Call>(
  deps: ProtectedDeps,
  protocol: ProtocolAdapter<C>,
  request: ProtectedRequest,
  ending: Ending,
): void {
  try {
    protocol.read(
      request,
      inRequestContext(request, (verdict) => takeVerdict(deps, protocol, request, verdict, ending)),
      ending.failed,
    );
  } catch (error) {
    ending.failed(error);
  }
}

/**
 * `then`, run in the request's async context when it is traced: its spans follow that context,
 * which a body's events do not carry.
 */
function inRequestContext<T extends unknown[]>(
  request: ProtectedRequest,
  then: (...args: T) => void,
): (...args: T) => void {
  return request.trace === undefined ? then : AsyncResource.bind(then);
}

/** Answers what can be answered in this turn (answerNow), and hands the rest to the store's way. */
function takeVerdict<C extends Call>(
  deps: ProtectedDeps,
  protocol: ProtocolAdapter<C>,
  request: ProtectedRequest,
  verdict: Verdict<C>,
  ending: Ending,
): void {
  let now: Outcome | undefined;
  try {
    now = answerNow(deps, protocol, request, verdict);
  } catch (error) {
    return ending.failed(error);
  }
  if (now !== undefined) ending.finished(now);
  else if (verdict.kind !== 'refuse')
    afterRead(deps, protocol, request, verdict).then(ending.finished, ending.failed);
}

/**
 * What is answered in the turn the verdict came: a refusal, or a repeat the replay cache answers (a
 * replay, or a 422 for a key reused with another request). Undefined: the store decides (afterRead).
 * Traced requests take the store's way, where each claim is a span.
 */
function answerNow<C extends Call>(
  deps: ProtectedDeps,
  protocol: ProtocolAdapter<C>,
  request: ProtectedRequest,
  verdict: Verdict<C>,
): Outcome | undefined {
  if (verdict.kind === 'refuse') {
    verdict.answer(request.res);
    return verdict.outcome;
  }
  if (verdict.kind !== 'protect' || request.trace !== undefined) return undefined;
  const { call } = verdict;
  // Shadow mode forwards every repeat anyway.
  if (!call.policy.enforce) return undefined;
  let claim: ClaimResult | undefined;
  try {
    claim = deps.store.recall(new CallClaim(call, request.route.name, undefined));
  } catch (error) {
    // A fingerprint that cannot be read: refused on the store's way, as any other.
    if (error instanceof UnreadableCall) return undefined;
    throw error;
  }
  if (claim?.kind === 'completed') {
    protocol.replay(request, call, claim.response, true);
    return outcomeOf(call, 'replayed', claim);
  }
  if (claim?.kind === 'mismatch') {
    const route = request.route.name;
    protocol.refuse(request, call, reused(route, call.id.key, protocol.reusedDetail));
    return outcomeOf(call, 'mismatch', claim);
  }
  return undefined;
}

/** A verdict memory could not answer: passed on, polled, or claimed and answered as the claim decides. */
async function afterRead<C extends Call>(
  deps: ProtectedDeps,
  protocol: ProtocolAdapter<C>,
  request: ProtectedRequest,
  verdict: Exclude<Verdict<C>, { kind: 'refuse' }>,
): Promise<Outcome> {
  if (verdict.kind === 'pass') return passOn(deps, request, verdict);
  if (verdict.kind === 'poll') return answerPoll(deps, request, verdict.poll);
  const { call } = verdict;
  const { policy } = call;
  const { res } = request;
  // A repeat that may join its running call as a handle learns at once that it runs: it neither
  // waits for nor attaches to the call this process forwards.
  const onConcurrent = call.deferral?.joinRunning ? 'reject' : policy.onConcurrent;
  // Shadow mode forwards every repeat anyway: nothing to coalesce, nothing to wait for.
  const claimant = policy.enforce
    ? new Claimant(
        onConcurrent,
        performance.now() + policy.waitTimeoutMs,
        policy.maxWaitersPerKey,
        // Resolves once the client has gone (its response closed before it was answered).
        () =>
          new Promise<void>((resolve) => {
            if (res.destroyed) resolve();
            else res.once('close', () => resolve());
          }),
        onConcurrent === 'attach' ? new LiveAnswer() : undefined,
      )
    : undefined;
  try {
    return await claimAndAnswer(deps, protocol, request, call, claimant);
  } catch (error) {
    if (error instanceof UnreadableCall) {
      protocol.refuse(request, call, error.problem);
      return outcomeOf(call, 'bad_request');
    }
    if (!(error instanceof StoreUnavailable)) throw error;
    // Nothing was forwarded: fail closed, or in shadow mode forward anyway.
    if (!policy.enforce)
      return forwardUnstored(deps, request, call.id.key, call.body, {
        ...outcomeOf(call, 'executed'),
        shadow: 'would_reject_store_unavailable',
      });
    protocol.refuse(request, call, storeUnavailableError(request, call.id.key, error.cause));
    return outcomeOf(call, 'store_unavailable');
  } finally {
    claimant?.end();
  }
}

/** Claims the call's key, and answers or forwards as each claim decides. */
async function claimAndAnswer<C extends Call>(
  deps: ProtectedDeps,
  protocol: ProtocolAdapter<C>,
  request: ProtectedRequest,
  call: C,
  claimant: Claimant | undefined,
): Promise<Outcome> {
  const { id, policy } = call;
  const route = request.route.name;
  const claimRequest = new CallClaim(call, route, claimant);
  const claimOnce = (): Promise<ClaimResult> =>
    claimCall(deps, request, () => deps.store.claim(claimRequest));

  let claim = await claimOnce();
  let races = 0;
  let waitOver = false;
  let waitedMs = 0;
  // Whether this request has asked the upstream about an unknown outcome, and what it said.
  let probed = false;
  let reconciled: Outcome['reconcile'];
  let settledUnknown = false;
  for (;;) {
    // A repeat of a running call that may join it gets the call's handle (opened now if need be).
    if (
      claim.kind === 'in-flight' &&
      claim.leaseRemainingMs > 0 &&
      call.deferral?.joinRunning === true &&
      canDefer(deps, protocol)
    ) {
      const handle = await openHandle(deps, request, call);
      if (handle !== null) {
        protocol.deferred!(request, call, handle);
        return outcomeOf(call, 'deferred', claim);
      }
      // It ended meanwhile: what it became is claimed next.
      if (++races < MAX_RACES) {
        claim = await claimOnce();
        continue;
      }
    }
    const clientLeft = claimant?.clientLeft ?? false;
    const decision: ClaimDecision = decide(claim, policy, {
      races,
      waitOver,
      waitedMs,
      clientLeft,
    });
    const answered = (label: Outcome['label']): Outcome => outcomeOf(call, label, claim);
    switch (decision.kind) {
      case 'forward': {
        const forwarded = await forward(
          deps,
          protocol,
          request,
          call,
          decision.fence,
          claimant,
          claim.attempts,
        );
        return reconciled === undefined ? forwarded : { ...forwarded, reconcile: reconciled };
      }
      case 'replay': {
        let response = decision.response;
        // An unknown outcome on a route with reconcile: ask the upstream first (once a request).
        if (response.outcomeUnknown && !probed && reconciles(deps, call)) {
          probed = true;
          const step = await reconcileReplay(
            deps,
            request.route,
            request.req.headers,
            call,
            response,
          );
          reconciled = step.label;
          if (step.kind === 'claim-again') {
            claim = await claimOnce();
            break;
          }
          response = step.response;
        }
        protocol.replay(request, call, response, true);
        if (reconciled === undefined && !settledUnknown) return answered('replayed');
        return {
          ...answered('replayed'),
          reconcile: reconciled,
          outcomeUnknown: settledUnknown || undefined,
        };
      }
      case 'mismatch':
        protocol.refuse(request, call, reused(route, id.key, protocol.reusedDetail));
        return answered('mismatch');
      case 'in-flight':
        protocol.refuse(request, call, inFlight(route, id.key, decision.leaseRemainingMs));
        return answered('in_flight');
      case 'client-gone':
        return outcomeOf(call, 'client_gone');
      case 'shadow':
        return forwardUnstored(deps, request, id.key, call.body, {
          ...answered('executed'),
          shadow: decision.verdict,
        });
      case 'attach': {
        const attached = protocol.attach?.(request, call, decision.live);
        // The answer outgrew what can be joined whole since: claim again, and wait for the record.
        if (attached === undefined) {
          claim = await claimOnce();
          break;
        }
        const end = await attached;
        if (end === 'gone') return outcomeOf(call, 'client_gone', claim);
        return { ...answered('attached'), outcomeUnknown: end === 'failed' || undefined };
      }
      case 'wait': {
        const started = performance.now();
        await storeCall(deps, request, 'wait', () =>
          deps.store.waitForChange(id, call.fingerprint, claimant!),
        );
        waitedMs += performance.now() - started;
        if (performance.now() >= claimant!.deadline) waitOver = true;
        else if (!claimant!.clientLeft) {
          claim = await claimOnce();
          waitedMs = 0;
        }
        break;
      }
      case 'take-over': {
        const fence = await storeCall(deps, request, 'take over', () =>
          deps.store.takeOver(
            id,
            decision.fence,
            policy.lockTimeoutMs,
            policy.lockTimeoutMs + policy.ttlMs,
            claimant,
          ),
        );
        if (fence !== null)
          return forward(deps, protocol, request, call, fence, claimant, claim.attempts);
        if (++races < MAX_RACES) claim = await claimOnce(); // someone else moved it on
        break;
      }
      case 'settle-unknown': {
        const unknown = protocol.unknownOutcome(call, leaseEndedUnknown(route, id.key, policy));
        const settled = await storeCall(deps, request, 'settle unknown', () =>
          deps.store.settleUnknown(id, decision.fence, unknown, policy.ttlMs, claimant),
        );
        if (settled !== null) {
          if (reconciles(deps, call)) {
            // Kept with the record for its probe, then looked at again: the probe may be due now.
            await keepForProbe(deps, call, decision.fence, settled);
            settledUnknown = true;
            claim = await claimOnce();
            break;
          }
          protocol.replay(request, call, settled, true);
          return { ...answered('replayed'), outcomeUnknown: true };
        }
        if (++races < MAX_RACES) claim = await claimOnce();
        break;
      }
    }
  }
}

/**
 * Forwards under the claim with `fence`, then settles it: complete with the upstream's answer,
 * release it so a retry runs, or — when the upstream may have acted and nothing says what it
 * answered — record an unknown outcome as the route says (`unknownOutcome`).
 */
async function forward<C extends Call>(
  deps: ProtectedDeps,
  protocol: ProtocolAdapter<C>,
  request: ProtectedRequest,
  call: C,
  fence: string,
  claimant: Claimant | undefined,
  attempts: number,
): Promise<Outcome> {
  const { id, policy } = call;
  // What the store said of the completion or release, when it was not simply stored.
  let landing: Outcome['landing'];
  const done = (label: Outcome['label'], outcomeUnknown?: boolean): Outcome => ({
    // A long call answered with its handle: the client has its answer, whatever came of the forward.
    ...outcomeOf(call, deferring?.deferred === true ? 'deferred' : label),
    attempts,
    outcomeUnknown,
    landing,
    streamedBytes: receiver.streamedBytes,
  });
  // The upstream has answered, so the client gets its answer whatever the store says: a write the
  // store could not make at once it keeps sending (queued), and one it gives up on (failed) leaves
  // the claim in progress until its lease ends.
  /** When the stored answer expires, once it is stored (its Idempotency-Expires). */
  let expiresAt: number | undefined;
  const settle = async (
    settlement: Settlement,
    followUp?: () => Promise<unknown>,
  ): Promise<void> => {
    if (settlement.kind === 'complete')
      landing = notStored(
        await settleStoreCall(deps, request, 'complete', async () => {
          const result = await deps.store.complete(
            id,
            fence,
            settlement.response,
            policy.ttlMs,
            claimant,
            followUp,
          );
          expiresAt = result.expiresAt;
          return result.landing;
        }),
      );
    else if (settlement.kind === 'release')
      landing = notStored(
        await settleStoreCall(deps, request, 'release', () => deps.store.release(id, fence)),
      );
  };
  /** The upstream may have acted: at most once, so under `fail` the answer is stored for good. */
  const unknownOutcome = async (
    error: Settlement & { kind: 'unknown' },
    clientHasHead: boolean,
  ): Promise<Outcome> => {
    let stored = protocol.unknownOutcome(call, afterUnknownOutcome(error.error, policy));
    // Under `retry` the claim stays in progress; a repeat takes it over once the lease ends.
    // What a probe needs is kept with the record: by the store's outbox when the completion is queued.
    // What arrived of an answer that broke off goes with the record, for the operator only.
    if (policy.unknownOutcome === 'fail') {
      const partial = receiver.partial?.();
      const response = partial === undefined ? stored : { ...stored, partial };
      await settle({ kind: 'complete', response }, keepOnceLanded(deps, call, fence));
    }
    if (policy.unknownOutcome === 'fail' && (landing === undefined || landing === 'queued'))
      stored = await keepForProbe(deps, call, fence, stored, landing === 'queued');
    if (clientHasHead) receiver.endBroken(error.error);
    else if (deferring?.deferred === true) receiver.detach();
    // Shadow mode answers as a pass-through route would: the same 502/504, without our marker.
    else if (!policy.enforce) protocol.refuse(request, call, error.error);
    else protocol.replay(request, call, { ...stored, expiresAt }, false);
    return done('upstream_error', true);
  };

  const receiver = protocol.receive(request, call, settle, claimant?.live);
  // A long call's client may cancel it (an MCP tasks/cancel): then its upstream request is stopped.
  let abortUpstream: ((reason: Error) => void) | undefined;
  // Most calls are never deferred: nothing is made for them.
  const deferring =
    call.deferral === undefined
      ? undefined
      : deferLater(deps, protocol, request, call, receiver, (reason) => abortUpstream?.(reason));
  deps.observer?.claimsHeld(1);
  const started = performance.now();
  try {
    try {
      await sendUpstream(
        deps.upstreams,
        request,
        id.key,
        call.body,
        receiver,
        deferring && ((abort) => (abortUpstream = abort)),
      );
    } catch (error) {
      request.timings.upstream += performance.now() - started;
      // Stopped because its client cancelled it: it was sent, so it may have partly run.
      if (error instanceof CallCancelled)
        return await unknownOutcome(
          { kind: 'unknown', error: cancelledCall(request.route.name, id.key) },
          receiver.streaming,
        );
      const failure = transportFailure(request.route, error, id.key);
      if (receiver.status === 0 && !failure.sent) {
        // Nothing reached the upstream: let a retry run it.
        await settle({ kind: 'release' });
        if (deferring?.deferred !== true) protocol.refuse(request, call, failure.error);
        return done('upstream_error');
      }
      if (receiver.settled) {
        // The result is stored and on its way; only what came after it broke off.
        receiver.end(expiresAt);
        return done('executed');
      }
      return await unknownOutcome({ kind: 'unknown', error: failure.error }, receiver.streaming);
    }
    request.timings.upstream += performance.now() - started;
    if (!receiver.settled) {
      const settlement = receiver.settlement();
      if (settlement.kind === 'unknown')
        return await unknownOutcome(settlement, receiver.streaming);
      await settle(settlement);
    }
    receiver.end(expiresAt);
    return done('executed');
  } finally {
    deferring?.stop();
    receiver.close();
    claimant?.live?.close();
    deps.observer?.claimsHeld(-1);
  }
}

/**
 * What the store is asked to claim for a call. Its fingerprint is read from the call only when the
 * store asks (a sent key's is computed then: rest/adapter.ts's SentKeyCall says why through a class getter).
 */
class CallClaim implements ClaimRequest {
  readonly id: RecordId;
  readonly leaseMs: number;
  readonly claimExpiryMs: number;
  readonly raw: Buffer | undefined;
  readonly fingerprintEpoch: string;

  constructor(
    private readonly call: Call,
    readonly route: string,
    readonly claimant: Claimant | undefined,
  ) {
    const { policy } = call;
    this.id = call.id;
    this.leaseMs = policy.lockTimeoutMs;
    this.claimExpiryMs = policy.lockTimeoutMs + policy.ttlMs;
    this.raw = call.raw;
    this.fingerprintEpoch = policy.fingerprintEpoch;
  }

  get fingerprint(): Buffer {
    return this.call.fingerprint;
  }
}

/** A settlement's landing as the log shows it: nothing when stored, as most are. */
function notStored(landing: Landing | 'failed'): Outcome['landing'] {
  return landing === 'stored' ? undefined : landing;
}

/** What the log says of a call answered with `label`, and of the claim that decided it. */
function outcomeOf(call: Call, label: Outcome['label'], claim?: ClaimResult): Outcome {
  const from = claim?.from;
  return {
    label,
    key: call.id.key,
    keyDerived: call.keyDerived || undefined,
    tool: call.tool,
    attempts: claim === undefined || from !== undefined ? undefined : claim.attempts,
    from,
  };
}
