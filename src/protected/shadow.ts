// Shadow mode (`enforce: false`): the proxy runs beside a legacy service without changing a single
// answer. Every request is forwarded and the upstream's status, headers and body go back unchanged;
// what enforcement would have done is only written down (log `shadow`, metric
// idempotency_proxy_shadow_decisions_total), so a team can see the replays, 409s and 422s it would
// get before turning enforcement on.
//
//   claim ─┬─ claimed ──────────► forward, complete/release as usual (so later requests see a record)
//          ├─ completed ────────► forward unstored, shadow = would_replay
//          ├─ mismatch ─────────► forward unstored, shadow = would_reject_mismatch
//          ├─ in flight ────────► forward unstored, shadow = would_reject_in_flight (or would_wait)
//          └─ store down ───────► forward unstored, shadow = would_reject_store_unavailable
//   no / invalid key, too large ► streamed as pass-through, shadow = would_reject_missing_key, ...
//
// "Unstored" forwards leave the record alone (only the claim's attempt counter moved).
import type { IncomingMessage } from 'node:http';
import { performance } from 'node:perf_hooks';
import type { IdempotencyPolicy } from '../config/types';
import { readBody } from '../http/body';
import { sendProblem } from '../http/problem';
import type { RequestLogEntry } from '../http/request-log';
import { responseHeaderPairs } from '../http/response';
import type { UpstreamPools } from '../upstream/protected';
import { sendUpstream, startStreaming, transportFailure, writeChunk } from './outgoing';
import type { ProtectedDeps, ProtectedRequest } from './context';
import type { ClaimResult } from '../store/record';

export type ShadowVerdict = NonNullable<RequestLogEntry['shadow']>;

/**
 * What enforcement would have answered instead of forwarding, given the claim; undefined when it
 * would have forwarded too: the claim was won, or (unknownOutcome: retry) an in-flight claim whose
 * lease ended is taken over as usual. Under `fail` such a claim would replay its unknown outcome.
 */
export function shadowVerdict(
  claim: ClaimResult,
  policy: IdempotencyPolicy,
): ShadowVerdict | undefined {
  switch (claim.kind) {
    case 'claimed':
      return undefined;
    case 'completed':
      return 'would_replay';
    case 'mismatch':
      return 'would_reject_mismatch';
    case 'in-flight':
      if (claim.leaseRemainingMs > 0)
        return policy.onConcurrent === 'wait' ? 'would_wait' : 'would_reject_in_flight';
      return policy.unknownOutcome === 'retry' ? undefined : 'would_replay';
  }
}

/**
 * Forwards a request the proxy would have refused before reading its body (no key, invalid key,
 * body too large) as a pass-through route does: streamed both ways, whatever its size.
 */
export function passThroughInShadow(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  verdict: ShadowVerdict,
): void {
  request.log.outcome = 'passthrough';
  request.log.shadow = verdict;
  deps.passThrough.web(request.req, request.res, request.route, request.target, request.trace);
}

/**
 * Forwards with undici and streams the upstream's answer back as it is, storing nothing: the
 * "forward anyway" of shadow mode. A transport failure is answered as on a pass-through route
 * (502/504, no Idempotency-Outcome marker).
 */
export async function forwardUnstored(
  upstreams: UpstreamPools,
  request: ProtectedRequest,
  key: string | undefined,
  body: Buffer,
  verdict: ShadowVerdict | undefined,
): Promise<void> {
  const { res, route, log } = request;
  // Without a verdict this is no shadow decision: a message an MCP route does not protect.
  log.shadow = verdict;
  const started = performance.now();
  let answered = false;
  try {
    await sendUpstream(upstreams, request, key, body, {
      head(status, headers) {
        answered = true;
        log.outcome = verdict === undefined ? 'passthrough' : 'executed';
        const pairs = responseHeaderPairs(headers, { keepSetCookie: true });
        startStreaming(res, status, pairs, headers['content-length']);
      },
      data: (chunk) => writeChunk(res, chunk),
    });
    res.end();
  } catch (error) {
    log.outcome = 'upstream_error';
    if (answered)
      res.destroy(); // the client already has a head and part of a body
    else sendProblem(res, transportFailure(route, error, key).error);
  } finally {
    log.upstreamMs += performance.now() - started;
  }
}

/** Reads the body; one over `limitBytes` is put back so the request can still be streamed whole. */
export function readBodyOrRewind(req: IncomingMessage, limitBytes: number): Promise<Buffer> {
  return readBody(req, limitBytes, { rewindOnOverflow: true });
}
