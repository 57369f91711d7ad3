// What a protected request sends upstream and how an answer streams back to the client: shared by the
// pipeline's forward (pipeline.ts), the protocols' receivers (REST, MCP, A2A) and repeats attached
// to a running stream (attach.ts); and the forwards that store nothing: what a protocol passes,
// and shadow mode's "forward anyway" (below).
import { IncomingMessage, ServerResponse } from 'node:http';
import { Socket } from 'node:net';
import type { IdempotencyPolicy, RouteConfig } from '../config/types';
import { EDGE_HEADERS, forwardedHeaders, hopByHopNames, keepsEdgeHeader } from '../http/headers';
import type { RequestTarget } from '../http/router';
import { responseHeaderPairs, statusHasBody } from '../http/response';
import { classifyTransportError, type TransportFailure } from '../upstream/transport-errors';
import type { OutgoingRequest, ResponseReceiver, UpstreamPools } from '../upstream/protected';
import type { HeaderPairs } from '../store/record';
import { type UpstreamCallEvent, upstreamCalls } from '../observability/tracing';
import { scopedKeyOf } from '../idempotency/scope';
import { tenantHash } from '../idempotency/tenant';
import type { AnswerReshaper, Outcome, ProtectedDeps, ProtectedRequest, Verdict } from './protocol';
import { performance } from 'node:perf_hooks';
import { readBody } from '../http/body';
import { sendProblem } from '../http/problem';

/**
 * Request headers sent upstream: no hop-by-hop, no framing, the edge's X-Forwarded-* and decisions
 * (headers.ts), the key as forwardKeyAs (none when a shadow-mode request has no usable key).
 */
export function outgoingHeaders(
  req: IncomingMessage,
  target: RequestTarget,
  policy: IdempotencyPolicy,
  key: string | undefined,
): Record<string, string | string[]> {
  const incoming = req.headers;
  const dropped = hopByHopNames(incoming);
  const headers: Record<string, string | string[]> = {};
  // for…in, not Object.entries: no [name, value] array per header.
  for (const name in incoming) {
    const value = incoming[name];
    if (value === undefined || dropped.has(name)) continue;
    if (
      name === 'host' ||
      name === 'content-length' ||
      name === 'expect' ||
      name === policy.key.header
    )
      continue;
    if (EDGE_HEADERS.has(name) && !keepsEdgeHeader(name, target)) continue;
    headers[name] = value;
  }
  Object.assign(headers, forwardedHeaders(req, target));
  if (policy.forwardKeyAs !== null && key !== undefined) {
    // Sent with the configured spelling: some legacy services compare header names case-sensitively.
    delete headers[policy.forwardKeyAs.toLowerCase()];
    headers[policy.forwardKeyAs] =
      policy.key.forward === 'scoped' ? scopedKey(policy, req.headers, key) : key;
  }
  return headers;
}

/**
 * key.forward: scoped — lower-case hex SHA-256 of `<scope>\n<tenant>\n<key>`, where tenant is the
 * tenant hash the record is stored under ('' on an untenanted route): the record's identity, so
 * two tenants' (or two groups') `order-42` never meet at an upstream that dedupes on the header,
 * and one tenant's retries always carry the same value. Neither a scope name nor a key can hold a
 * newline, so the three parts cannot run into each other.
 */
export function scopedKey(
  policy: Pick<IdempotencyPolicy, 'scope' | 'tenant'>,
  headers: IncomingMessage['headers'],
  key: string,
): string {
  return scopedKeyOf({ scope: policy.scope, tenant: tenantHash(headers, policy.tenant), key });
}

/**
 * Sends a protected request upstream (UpstreamPools.send): the request line's method (with
 * methodOverride the upstream applies the override itself), the canonical path, the outgoing
 * headers with `key`, the body already read. The call is published for the tracer
 * (observability/tracing.ts: upstreamCalls), which may put its span's context in the headers in
 * place of the client's traceparent; with nobody listening, this adds nothing. `abortable` is
 * handed the means to stop the request (a long call cancelled by its client), once it is sent.
 */
export async function sendUpstream(
  upstreams: UpstreamPools,
  request: ProtectedRequest,
  key: string | undefined,
  body: Buffer,
  receiver: ResponseReceiver,
  abortable?: (abort: (reason: Error) => void) => void,
): Promise<void> {
  const { req, target, policy } = request;
  const upstream = request.route.upstream;
  const method = req.method ?? 'POST';
  const headers = outgoingHeaders(req, target, policy, key);
  const outgoing: OutgoingRequest = { method, path: target.forwardPath, headers, body };
  if (!upstreamCalls.start.hasSubscribers)
    return upstreams.send(upstream, outgoing, receiver, abortable);
  const event: UpstreamCallEvent = { upstream, method, headers, status: 0 };
  upstreamCalls.start.publish(event);
  try {
    await upstreams.send(
      upstream,
      outgoing,
      {
        head(answered, answerHeaders) {
          event.status = answered;
          receiver.head(answered, answerHeaders);
        },
        data: (chunk) => receiver.data(chunk),
      },
      abortable,
    );
  } catch (error) {
    event.error = error;
    throw error;
  } finally {
    upstreamCalls.end.publish(event);
  }
}

/** A failed upstream call as 502/504, and whether the request may have reached the upstream. */
export function transportFailure(
  route: RouteConfig,
  error: unknown,
  key: string | undefined,
): TransportFailure {
  const upstream = route.upstream;
  return classifyTransportError(error, {
    upstream: upstream.name,
    route: route.name,
    key,
    timeoutMs: upstream.timeoutMs,
  });
}

/**
 * Where a receiver writes once its client was answered otherwise (AnswerReceiver.detach): a response
 * that belongs to no connection and is destroyed, so every write to it is skipped (the helpers here
 * check `destroyed`) or goes nowhere, as for a client that left.
 */
export function detachedResponse(): ServerResponse {
  const res = new ServerResponse(new IncomingMessage(new Socket()));
  res.destroy();
  return res;
}

/** Sends the head of an answer whose body follows in chunks (writeChunk), keeping its length. */
export function startStreaming(
  res: ServerResponse,
  status: number,
  headers: HeaderPairs,
  contentLength: string | string[] | undefined,
): void {
  if (res.destroyed) return;
  const flat: string[] = [];
  for (const [name, value] of headers) flat.push(name, value);
  if (typeof contentLength === 'string' && statusHasBody(status))
    flat.push('content-length', contentLength);
  res.writeHead(status, flat);
  // Node holds a head back until the first body write; an event stream may stay quiet for a while,
  // and its client is waiting for the head to know the stream is open.
  res.flushHeaders();
}

/**
 * Writes a chunk of a streamed answer; returns a promise (that never rejects) only when the client is
 * slower than the upstream and reading should pause until it drains.
 */
export function writeChunk(res: ServerResponse, chunk: Buffer): Promise<void> | undefined {
  if (res.destroyed) return undefined; // the client left; keep reading so the upstream call completes
  if (res.write(chunk)) return undefined;
  return new Promise((resolve) => {
    const done = (): void => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.on('drain', done);
    res.on('close', done);
  });
}

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

/**
 * Forwards what a protocol passes: with the body it read, unstored; or, when it read none (no key
 * where none is required, or in shadow mode no key, an invalid one, a body too large), as a
 * pass-through route does: streamed both ways, whatever its size.
 */
export function passOn(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  pass: Extract<Verdict<never>, { kind: 'pass' }>,
): Outcome | Promise<Outcome> {
  if (pass.body !== undefined) {
    const key = pass.keyAsSent ? sentKeyHeader(request) : pass.key;
    return forwardUnstored(deps, request, key, pass.body, pass.outcome, pass.reshape?.());
  }
  deps.passThrough.web(request.req, request.res, request.route, request.target, request.trace);
  return pass.outcome;
}

/**
 * Forwards with undici and streams the upstream's answer back as it is, storing nothing: the
 * "forward anyway" of shadow mode, and how an MCP route forwards what it does not protect. A
 * transport failure is answered as on a pass-through route (502/504, no Idempotency-Outcome
 * marker). `outcome` is what the log says once the upstream has answered: executed with the shadow
 * verdict, or passthrough. `reshaper`, when the protocol changes the answer on its way.
 */
export async function forwardUnstored(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  key: string | undefined,
  body: Buffer,
  outcome: Outcome,
  reshaper?: AnswerReshaper,
): Promise<Outcome> {
  const { res, route } = request;
  const started = performance.now();
  let answered = false;
  try {
    await sendUpstream(deps.upstreams, request, key, body, {
      head(status, headers) {
        answered = true;
        const pairs = responseHeaderPairs(headers, { keepSetCookie: true });
        if (reshaper === undefined) startStreaming(res, status, pairs, headers['content-length']);
        else startStreaming(res, status, reshaper.headers(status, pairs), undefined);
      },
      data(chunk) {
        if (reshaper === undefined) return writeChunk(res, chunk);
        const reshaped = reshaper.data(chunk);
        return reshaped === undefined ? undefined : writeChunk(res, reshaped);
      },
    });
    const rest = reshaper?.end();
    if (rest !== undefined && rest.length > 0 && !res.destroyed) res.write(rest);
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

/** The route's key header as the client sent it (one line of it), if any. */
function sentKeyHeader(request: ProtectedRequest): string | undefined {
  const value = request.req.headers[request.policy.key.header];
  return typeof value === 'string' ? value : undefined;
}
