// Forwarding under a claim, then settling it: complete with the upstream's answer, release it, or
// record an unknown outcome (README.md#what-a-client-sees-on-a-protected-route, the rows after
// "first request").
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import { performance } from 'node:perf_hooks';
import { responseHeaderPairs, writeWhole } from '../http/response';
import type { ResponseReceiver } from '../upstream/protected';
import { sendUpstream, startStreaming, transportFailure, writeChunk } from './outgoing';
import { type HeaderPairs, type RecordId, type StoredResponse } from '../store/record';
import { type ProtectedDeps, type ProtectedRequest } from './context';
import { completeRecord, releaseRecord, settleFailure } from './settle';
import { forwardToolCall } from '../mcp/forward-tool-call';
import type { Leader } from './local-keys';

export async function forward(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  id: RecordId,
  fence: string,
  body: Buffer,
  leader?: Leader,
): Promise<void> {
  deps.observer?.claimsHeld(1);
  try {
    const send = request.mcp ? forwardToolCall : forwardAndSettle;
    await send(deps, request, id, fence, body, leader);
  } finally {
    deps.observer?.claimsHeld(-1);
  }
}

async function forwardAndSettle(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  id: RecordId,
  fence: string,
  body: Buffer,
  leader: Leader | undefined,
): Promise<void> {
  const { res, policy, log } = request;
  const started = performance.now();
  const answer = new UpstreamAnswer(res, policy.maxResponseBytes);
  try {
    await sendUpstream(deps.upstreams, request, id.key, body, answer);
  } catch (error) {
    log.upstreamMs += performance.now() - started;
    const failure = transportFailure(request.route, error, id.key);
    if (answer.status === 0) return settleFailure(deps, request, id, fence, failure, leader);
    // The answer broke off after its head: the upstream has acted, or may have.
    if (answer.streaming) res.destroy(); // the client already has a head and part of a body
    const broken = { sent: true, error: failure.error };
    return settleFailure(deps, request, id, fence, broken, leader, answer.streaming);
  }
  log.upstreamMs += performance.now() - started;
  log.outcome = 'executed';

  const { status, headers: clientHeaders, streaming } = answer;
  const bodyBuffer = answer.body();
  if (!policy.storesStatus(status)) {
    // The upstream did not act (or the route does not keep this status): let a retry execute again.
    await releaseRecord(deps, request, id, fence);
  } else {
    const stored: StoredResponse = {
      status,
      headers: policy.replaySetCookie
        ? clientHeaders
        : clientHeaders.filter(([name]) => name !== 'set-cookie'),
      body: bodyBuffer,
      bodyOmitted: streaming,
      outcomeUnknown: false,
    };
    await completeRecord(deps, request, id, fence, stored, leader);
  }
  if (streaming) answer.end();
  else writeWhole(res, status, clientHeaders, bodyBuffer);
}

/**
 * Collects the upstream's answer to store it; one larger than maxResponseBytes is streamed to the
 * client as it arrives instead (replays then get its status and headers only).
 */
class UpstreamAnswer implements ResponseReceiver {
  status = 0;
  headers: HeaderPairs = [];
  streaming = false;
  private contentLength: string | string[] | undefined;
  private chunks: Buffer[] = [];
  /**
   * The latest chunk of a streamed answer, held back until the record is stored: with the
   * upstream's Content-Length the client takes the answer as complete at its last byte, and a retry
   * it sends then must find the record completed, not in flight.
   */
  private held: Buffer | undefined;
  private total = 0;

  constructor(
    private readonly res: ServerResponse,
    private readonly maxBytes: number,
  ) {}

  head(status: number, headers: IncomingHttpHeaders): void {
    this.status = status;
    this.headers = responseHeaderPairs(headers, { keepSetCookie: true });
    this.contentLength = headers['content-length'];
  }

  data(chunk: Buffer): Promise<void> | undefined {
    this.total += chunk.length;
    if (!this.streaming && this.total > this.maxBytes) {
      this.streaming = true;
      startStreaming(this.res, this.status, this.headers, this.contentLength);
      for (const buffered of this.chunks) this.res.write(buffered);
      this.chunks = [];
    }
    if (this.streaming) {
      const previous = this.held;
      this.held = chunk;
      return previous === undefined ? undefined : writeChunk(this.res, previous);
    }
    this.chunks.push(chunk);
    return undefined;
  }

  /** Ends a streamed answer with the chunk held back (call once the record is stored). */
  end(): void {
    if (this.res.destroyed) return;
    if (this.held !== undefined) this.res.write(this.held);
    this.held = undefined;
    this.res.end();
  }

  /** The whole body, or an empty one when it was streamed. */
  body(): Buffer {
    if (this.streaming) return Buffer.alloc(0);
    return this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks, this.total);
  }
}
