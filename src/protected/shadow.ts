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
// "Unstored" forwards leave the record alone (only the claim's attempt counter moved). The verdicts
// themselves are decide.ts's; this file forwards.
import type { IncomingMessage } from 'node:http';
import { performance } from 'node:perf_hooks';
import { readBody } from '../http/body';
import { sendProblem } from '../http/problem';
import { responseHeaderPairs } from '../http/response';
import { sendUpstream, startStreaming, transportFailure, writeChunk } from './outgoing';
import type { Outcome, ProtectedDeps, ProtectedRequest } from './protocol';

/**
 * Forwards what a protocol passes: with the body it read, unstored; or, when it read none (no key
 * where none is required, or in shadow mode no key, an invalid one, a body too large), as a
 * pass-through route does: streamed both ways, whatever its size.
 */
export function passOn(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  pass: { readonly outcome: Outcome; readonly body?: Buffer; readonly key?: string },
): Outcome | Promise<Outcome> {
  if (pass.body !== undefined)
    return forwardUnstored(deps, request, pass.key, pass.body, pass.outcome);
  deps.passThrough.web(request.req, request.res, request.route, request.target, request.trace);
  return pass.outcome;
}

/**
 * Forwards with undici and streams the upstream's answer back as it is, storing nothing: the
 * "forward anyway" of shadow mode, and how an MCP route forwards what it does not protect. A
 * transport failure is answered as on a pass-through route (502/504, no Idempotency-Outcome
 * marker). `outcome` is what the log says once the upstream has answered: executed with the shadow
 * verdict, or passthrough.
 */
export async function forwardUnstored(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  key: string | undefined,
  body: Buffer,
  outcome: Outcome,
): Promise<Outcome> {
  const { res, route } = request;
  const started = performance.now();
  let answered = false;
  try {
    await sendUpstream(deps.upstreams, request, key, body, {
      head(status, headers) {
        answered = true;
        const pairs = responseHeaderPairs(headers, { keepSetCookie: true });
        startStreaming(res, status, pairs, headers['content-length']);
      },
      data: (chunk) => writeChunk(res, chunk),
    });
    res.end();
    return outcome;
  } catch (error) {
    if (answered)
      res.destroy(); // the client already has a head and part of a body
    else sendProblem(res, transportFailure(route, error, key).error, [], request.policy.errorShape);
    return { ...outcome, label: 'upstream_error' };
  } finally {
    request.timings.upstream += performance.now() - started;
  }
}

/** Reads the body; one over `limitBytes` is put back so the request can still be streamed whole. */
export function readBodyOrRewind(req: IncomingMessage, limitBytes: number): Promise<Buffer> {
  return readBody(req, limitBytes, { rewindOnOverflow: true });
}
