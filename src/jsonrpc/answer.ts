// The one answer handler for "JSON or event stream" that MCP and A2A share: what an upstream's
// answer to a protected JSON-RPC call is, as it arrives. Each protocol says what its events and its
// final JSON mean (tool-call-answer.ts, send-answer.ts); what is common lives here:
//
//   head ─┬─ 2xx text/event-stream ─► streamed to the client event by event (SseReader)
//         └─ anything else ─────────► kept whole up to maxResponseBytes; a larger one streams on
//   ended ─┬─ 3xx/4xx, or a status the route does not store ─► release
//          ├─ 5xx ─────────────────────────────────────────────► unknown outcome
//          └─ otherwise ──────────────────────────────────────► the protocol's own reading
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import type { IdempotencyPolicy } from '../config/types';
import { ProxyError } from '../errors';
import { responseHeaderPairs, writeWhole } from '../http/response';
import { parseJson, type ParsedJson } from '../idempotency/canonical-json';
import type { Settlement } from '../protected/decide';
import { detachedResponse, startStreaming, writeChunk } from '../protected/outgoing';
import type { AnswerReceiver } from '../protected/protocol';
import { StreamCapture } from '../protected/stream-capture';
import type { HeaderPairs, StoredResponse } from '../store/record';
import { SseReader } from './event-stream';

export const EVENT_STREAM = 'text/event-stream';

/** Where a protected call runs, as its answer needs it. */
export interface AnswerPlace {
  readonly route: string;
  readonly key: string;
  readonly policy: IdempotencyPolicy;
}

export abstract class JsonOrEventStreamAnswer implements AnswerReceiver {
  status = 0;
  /** True once the client has the head (an event stream, or a JSON answer too large to keep). */
  streaming = false;
  /** True once the record is settled (by the receiver itself, or by the pipeline's settle). */
  settled = false;
  protected headers: HeaderPairs = [];
  /** Set for a 2xx event stream: its events as they complete. */
  protected events: SseReader | undefined;
  /** Bytes held back from the client until the record is settled. */
  protected held: Buffer[] = [];
  /** A JSON answer as it arrives (protected/stream-capture.ts). */
  protected readonly kept: StreamCapture;
  private contentLength: string | string[] | undefined;
  /**
   * Set for a call that may still be answered with a handle (a task: protected/long-calls.ts): an
   * event stream's head and events are held back until its final response, or until they outgrow
   * maxResponseBytes, since a client that has part of an answer can no longer get a task instead.
   */
  private holding: boolean;
  /** The events held back, and their size. */
  private early: Buffer[] = [];
  private earlyBytes = 0;

  constructor(
    protected res: ServerResponse,
    private readonly where: AnswerPlace,
    /** The forward is over. */
    readonly close: () => void,
    holdStream = false,
  ) {
    this.kept = new StreamCapture(where.policy.maxResponseBytes);
    this.holding = holdStream;
  }

  protected get policy(): IdempotencyPolicy {
    return this.where.policy;
  }

  head(status: number, headers: IncomingHttpHeaders): void {
    this.status = status;
    this.headers = responseHeaderPairs(headers, { keepSetCookie: true });
    this.contentLength = headers['content-length'];
    if (status >= 200 && status < 300 && isEventStream(headers['content-type'])) {
      this.events = new SseReader();
      if (this.holding) return;
      this.streaming = true;
      startStreaming(this.res, status, this.headers, undefined);
      this.streamStarted(status);
    }
  }

  detach(): void {
    this.res = detachedResponse();
    this.early = [];
    this.holding = false;
  }

  /** An event for the client: written, or held back with the head while the call may be deferred. */
  protected pass(bytes: Buffer): Promise<void> | undefined {
    if (!this.holding) return writeChunk(this.res, bytes);
    this.early.push(bytes);
    this.earlyBytes += bytes.length;
    if (this.earlyBytes > this.policy.maxResponseBytes) this.stopHolding();
    return undefined;
  }

  /** Sends a held event stream's head and events: from now on the client gets it as it comes. */
  protected stopHolding(): void {
    if (!this.holding) return;
    this.holding = false;
    if (this.events === undefined) return;
    this.streaming = true;
    startStreaming(this.res, this.status, this.headers, undefined);
    this.streamStarted(this.status);
    for (const bytes of this.early) if (!this.res.destroyed) this.res.write(bytes);
    this.early = [];
  }

  abstract data(chunk: Buffer): Promise<void> | undefined;

  /** What to do with the record once the answer has ended. */
  settlement(): Settlement {
    const status = this.status;
    if ((status >= 300 && status < 500) || !this.policy.storesStatus(status))
      return { kind: 'release' };
    if (status >= 500) return this.unknown(this.failedStatusDetail(status));
    return this.endedSettlement();
  }

  abstract end(expiresAt?: number): void;

  abstract endBroken(error: ProxyError): void;

  /** The settlement of an answer that ended with a status the route stores. */
  protected abstract endedSettlement(): Settlement;

  /** What a retry is told of a 5xx without a response: the call may have run. */
  protected abstract failedStatusDetail(status: number): string;

  /** An event stream's head has gone to the client. */
  protected streamStarted(_status: number): void {}

  /**
   * Writes the end of the client's answer: a kept JSON answer whole (with `extra` headers), or
   * the held bytes of a stream, and with `rest` what is left of an event cut off by the end.
   */
  protected writeEnd(extra: HeaderPairs, rest: boolean): void {
    if (this.res.destroyed) return;
    this.stopHolding();
    if (!this.streaming) {
      writeWhole(this.res, this.status, this.headers, this.body(), extra);
      return;
    }
    for (const bytes of this.held) this.res.write(bytes);
    this.held = [];
    if (rest && this.events !== undefined) this.res.write(this.events.rest());
    this.res.end();
  }

  protected unknown(detail: string): Settlement {
    const error = new ProxyError('UPSTREAM_CONNECTION_LOST', detail, {
      route: this.where.route,
      key: this.where.key,
    });
    return { kind: 'unknown', error };
  }

  /** A JSON answer, kept up to maxResponseBytes; a larger one streams to the client as it comes. */
  protected keep(chunk: Buffer): Promise<void> | undefined {
    if (this.kept.add(chunk)) return undefined;
    const earlier = this.kept.takeOverflowed();
    if (!this.streaming) {
      this.streaming = true;
      startStreaming(this.res, this.status, this.headers, this.contentLength);
      for (const kept of earlier) this.res.write(kept);
    }
    return writeChunk(this.res, chunk);
  }

  protected body(): Buffer {
    return this.kept.body();
  }
}

/** An answer to store for good. */
export function storedAnswer(status: number, headers: HeaderPairs, body: Buffer): Settlement {
  const response: StoredResponse = {
    status,
    headers,
    body,
    bodyOmitted: false,
    outcomeUnknown: false,
  };
  return { kind: 'complete', response };
}

/** JSON text as canonical-json reads it, or null for one with a duplicate key (or none at all). */
export function parsedOrNull(text: string | Buffer): ParsedJson | null {
  try {
    return parseJson(text);
  } catch {
    return null; // a duplicate key: not something the proxy can store faithfully
  }
}

export function isEventStream(contentType: string | undefined): boolean {
  return contentType?.split(';')[0]?.trim().toLowerCase() === EVENT_STREAM;
}
