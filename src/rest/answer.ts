// Takes the upstream's answer to a protected REST request as it arrives (docs/streams.md).
//
//   a stream (the route's `streams:` rule: stream-rule.ts) ─► each chunk to the client as it comes,
//        captured up to maxResponseBytes; the end waits until the record is stored
//   any other answer ─► kept whole, written once the record is stored; one that outgrows
//        maxResponseBytes is streamed from then on instead (replays get its status and headers)
//
// A stream sent chunked has no Content-Length: its client takes it as complete only at the closing
// zero-length chunk, which Node writes at res.end(), after the record is stored, so every chunk can
// go on at once. An answer streamed with the upstream's Content-Length is complete at its last byte,
// so its latest chunk is held back until the record is stored instead. Under onConcurrent: attach a
// stream is also published (store/live-answer.ts) for this process's repeats of the key to join.
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import { performance } from 'node:perf_hooks';
import { responseHeaderPairs, writeWhole } from '../http/response';
import type { LiveAnswer } from '../store/live-answer';
import type { IdempotencyPolicy } from '../config/types';
import type { HeaderPairs, PartialAnswer, StoredResponse } from '../store/record';
import type { Settlement } from '../protected/decide';
import { detachedResponse, startStreaming, writeChunk } from '../protected/outgoing';
import {
  type AnswerReceiver,
  type Call,
  expiresHeader,
  type ProtectedRequest,
} from '../protected/protocol';
import { StreamCapture } from '../protected/stream-capture';
import { isStream } from './stream-rule';

export class UpstreamAnswer implements AnswerReceiver {
  status = 0;
  /** True once the client has the head: a stream, or an answer too large to keep whole. */
  streaming = false;
  readonly settled = false;
  streamedBytes: number | undefined;
  private headers: HeaderPairs = [];
  private contentLength: string | string[] | undefined;
  private readonly capture: StreamCapture;
  /**
   * The latest chunk of an answer streamed with the upstream's Content-Length, held back until the
   * record is stored: its client takes the answer as complete at its last byte, and a retry it
   * sends then must find the record completed, not in flight.
   */
  private held: Buffer | undefined;
  private holdsLast = false;
  private res: ServerResponse;

  constructor(
    private readonly request: ProtectedRequest,
    private readonly call: Call,
    private readonly live: LiveAnswer | undefined,
  ) {
    this.res = request.res;
    this.capture = new StreamCapture(call.policy.maxResponseBytes);
  }

  head(status: number, headers: IncomingHttpHeaders): void {
    this.status = status;
    this.headers = responseHeaderPairs(headers, { keepSetCookie: true });
    this.contentLength = headers['content-length'];
    if (!isStream(this.call.policy.streams, status, headers)) return;
    this.startStreaming();
    this.live?.open({ status, headers: this.storedHeaders() }, this.capture);
  }

  data(chunk: Buffer): Promise<void> | undefined {
    if (!this.capture.add(chunk)) {
      const earlier = this.capture.takeOverflowed();
      if (!this.streaming) {
        // Too large to keep whole: the client gets it as it comes, replays only its head.
        this.startStreaming();
        for (const kept of earlier) this.res.write(kept);
      }
    }
    if (!this.streaming) return undefined;
    this.streamedBytes = this.capture.total;
    this.live?.push(chunk);
    this.request.timings.firstByte ??= performance.now() - this.request.timings.startedAt;
    if (!this.holdsLast) return writeChunk(this.res, chunk);
    const previous = this.held;
    this.held = chunk;
    return previous === undefined ? undefined : writeChunk(this.res, previous);
  }

  /** Stored when the route keeps the status; else released, so a retry executes again. */
  settlement(): Settlement {
    if (!this.call.policy.storesStatus(this.status)) return { kind: 'release' };
    const whole = this.capture.whole;
    const response: StoredResponse = {
      status: this.status,
      headers: this.storedHeaders(),
      body: this.capture.body(),
      bodyOmitted: !whole,
      outcomeUnknown: false,
    };
    return { kind: 'complete', response };
  }

  /** What arrived before the answer broke off: its head and the capture (cut at the limit). */
  partial(): PartialAnswer | undefined {
    if (this.status === 0) return undefined;
    const { status, capture } = this;
    return { status, headers: this.storedHeaders(), body: capture.prefix(), bytes: capture.total };
  }

  end(expiresAt?: number): void {
    if (!this.streaming) {
      const expires = expiresHeader(expiresAt);
      const echo = echoedKey(this.call.policy, this.call.id.key, this.headers);
      writeWhole(this.res, this.status, this.headers, this.capture.body(), withEcho(expires, echo));
    } else if (!this.res.destroyed) {
      if (this.held !== undefined) this.res.write(this.held);
      this.held = undefined;
      this.res.end();
    }
    this.live?.end();
  }

  /** The client already has a head and part of a body: all it can be told is that it broke off. */
  endBroken(): void {
    this.res.destroy();
    this.live?.fail();
  }

  close(): void {}

  detach(): void {
    this.res = detachedResponse();
  }

  private startStreaming(): void {
    this.streaming = true;
    const length = this.contentLength;
    this.holdsLast = typeof length === 'string';
    const echo = echoedKey(this.call.policy, this.call.id.key, this.headers);
    startStreaming(this.res, this.status, withEcho(this.headers, echo), length);
  }

  /** The headers a repeat gets: Set-Cookie only where the route replays it. */
  private storedHeaders(): HeaderPairs {
    return this.call.policy.replaySetCookie
      ? this.headers
      : this.headers.filter(([name]) => name !== 'set-cookie');
  }
}

/**
 * The key echoed on an answer, on a route that echoes it (an ACP profile's `Idempotency-Key`):
 * nothing when the answer carries it already (the upstream echoed it), or there is no key.
 */
export function echoedKey(
  policy: IdempotencyPolicy,
  key: string | undefined,
  headers: HeaderPairs,
): HeaderPairs {
  const echo = policy.echoKeyAs;
  if (echo === null || key === undefined) return NO_HEADERS;
  const lower = echo.toLowerCase();
  return headers.some(([name]) => name === lower) ? NO_HEADERS : [[echo, key]];
}

/** `headers` with the echoed key after them; the same array when there is none (most routes). */
export function withEcho(headers: HeaderPairs, echo: HeaderPairs): HeaderPairs {
  return echo.length === 0 ? headers : [...headers, ...echo];
}

const NO_HEADERS: HeaderPairs = Object.freeze([]);
