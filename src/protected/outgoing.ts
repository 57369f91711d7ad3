// What a protected request sends upstream and how an answer streams back to the client: shared by the
// pipeline's forward (pipeline.ts), the protocols' receivers (REST, MCP, A2A), their
// repeats attached to a running stream (attachClient) and shadow mode's unstored forwarding
// (shadow.ts).
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { IdempotencyPolicy, RouteConfig } from '../config/types';
import { EDGE_HEADERS, forwardedHeaders, hopByHopNames, keepsEdgeHeader } from '../http/headers';
import type { RequestTarget } from '../http/router';
import { statusHasBody } from '../http/response';
import { classifyTransportError, type TransportFailure } from '../upstream/transport-errors';
import type { OutgoingRequest, ResponseReceiver, UpstreamPools } from '../upstream/protected';
import type { HeaderPairs } from '../store/record';
import { TRACE_HEADERS, type RequestTrace } from '../observability/tracing';
import { scopedKeyOf } from '../idempotency/scope';
import { tenantHash } from '../idempotency/tenant';
import type { LiveAnswer, LiveListener } from '../store/live-answer';
import type { AttachEnd, ProtectedRequest } from './protocol';

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
 * headers with `key`, the body already read. A traced request goes inside an upstream span, whose
 * context replaces the client's traceparent; untraced, the client's trace headers go up as they
 * came, and this adds nothing.
 */
export function sendUpstream(
  upstreams: UpstreamPools,
  request: ProtectedRequest,
  key: string | undefined,
  body: Buffer,
  receiver: ResponseReceiver,
): Promise<void> {
  const { req, target, policy } = request;
  const outgoing: OutgoingRequest = {
    method: req.method ?? 'POST',
    path: target.forwardPath,
    headers: outgoingHeaders(req, target, policy, key),
    body,
  };
  const trace = request.trace;
  if (trace === undefined) return upstreams.send(request.route.upstream, outgoing, receiver);
  return sendTraced(upstreams, request, trace, outgoing, receiver);
}

async function sendTraced(
  upstreams: UpstreamPools,
  request: ProtectedRequest,
  trace: RequestTrace,
  outgoing: OutgoingRequest,
  receiver: ResponseReceiver,
): Promise<void> {
  const upstream = request.route.upstream;
  const headers = outgoing.headers;
  for (const name of TRACE_HEADERS) delete headers[name];
  const span = trace.upstream(upstream, outgoing.method, (name, value) => (headers[name] = value));
  let status = 0;
  try {
    await upstreams.send(upstream, outgoing, {
      head(answered, answerHeaders) {
        status = answered;
        receiver.head(answered, answerHeaders);
      },
      data: (chunk) => receiver.data(chunk),
    });
  } catch (error) {
    span.end(status, error);
    throw error;
  }
  span.end(status);
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

/** Resolves once the client's connection has closed. */
export function clientGone(res: ServerResponse): Promise<'gone'> {
  if (res.destroyed) return Promise.resolve('gone');
  return new Promise((resolve) => res.once('close', () => resolve('gone')));
}

// A repeat attached to the answer its key's first request is streaming (onConcurrent: attach;
// store/live-answer.ts): its client gets the head, what was sent so far, then each chunk as the
// first client does, and the same end — after the record is stored — or the same break.
//
// The first request's pace is the upstream's and its own client's; a repeat never slows it. What a
// repeat has not taken yet waits in its socket's buffer: chunks the capture keeps anyway, until the
// answer outgrows maxResponseBytes. A repeat that falls further behind than that is cut off (its
// retry replays the record), so a slow reader cannot make the proxy hold an unbounded stream.

/**
 * Attaches the request's client to `live` (protocols' `attach`), with `headers(head)` as the head's headers; undefined
 * when the answer can no longer be joined whole.
 */
export function attachClient(
  request: ProtectedRequest,
  live: LiveAnswer,
  headers: (stored: HeaderPairs) => HeaderPairs,
  /** The last bytes this client gets, from the final message the first request's answer ended with. */
  closing: (final: Buffer | undefined) => Buffer | undefined = () => undefined,
): Promise<AttachEnd> | undefined {
  const { res, timings } = request;
  const maxBehind = request.policy.maxResponseBytes;
  let finish!: (end: AttachEnd) => void;
  const ended = new Promise<AttachEnd>((resolve) => (finish = resolve));
  const listener: LiveListener = {
    chunk(chunk) {
      if (res.destroyed) return;
      res.write(chunk);
      if (res.writableLength > maxBehind) cut(res, live, listener);
    },
    end(final) {
      if (!res.destroyed) res.end(closing(final));
      finish('ended');
    },
    fail() {
      res.destroy();
      finish('failed');
    },
  };
  const joined = live.attach(listener);
  if (joined === undefined) return undefined;
  res.once('close', () => {
    live.detach(listener);
    finish(res.writableFinished ? 'ended' : 'gone');
  });
  startStreaming(res, joined.head.status, headers(joined.head.headers), undefined);
  for (const chunk of joined.sofar) res.write(chunk);
  if (joined.sofar.length > 0) timings.firstByte = performance.now() - timings.startedAt;
  return ended;
}

/** A repeat too far behind: let go of it (its socket's buffer with it). */
function cut(res: ServerResponse, live: LiveAnswer, listener: LiveListener): void {
  live.detach(listener);
  res.destroy();
}
