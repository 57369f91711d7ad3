// How a protected REST answer reaches its clients as it arrives (docs/streams.md): the upstream's
// answer to the request holding the claim (UpstreamAnswer), and the repeats attached to it
// (attachClient).
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
import type { LiveAnswer, LiveListener } from '../store/live-answer';
import type { HeaderPairs, StoredResponse } from '../store/record';
import type { Settlement } from './decide';
import { startStreaming, writeChunk } from './outgoing';
import {
  type AnswerReceiver,
  type AttachEnd,
  type Call,
  expiresHeader,
  type ProtectedRequest,
} from './protocol';
import { StreamCapture } from './stream-capture';
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
  private readonly res: ServerResponse;

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

  end(expiresAt?: number): void {
    if (!this.streaming) {
      const expires = expiresHeader(expiresAt);
      writeWhole(this.res, this.status, this.headers, this.capture.body(), expires);
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

  private startStreaming(): void {
    this.streaming = true;
    const length = this.contentLength;
    this.holdsLast = typeof length === 'string';
    startStreaming(this.res, this.status, this.headers, length);
  }

  /** The headers a repeat gets: Set-Cookie only where the route replays it. */
  private storedHeaders(): HeaderPairs {
    return this.call.policy.replaySetCookie
      ? this.headers
      : this.headers.filter(([name]) => name !== 'set-cookie');
  }
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
 * Attaches the request's client to `live`, with `headers(head)` as the head's headers; undefined
 * when the answer can no longer be joined whole.
 */
export function attachClient(
  request: ProtectedRequest,
  live: LiveAnswer,
  headers: (stored: HeaderPairs) => HeaderPairs,
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
    end() {
      if (!res.destroyed) res.end();
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
