// Takes an A2A agent's answer to a protected send as it arrives (src/a2a/README.md#what-the-client-sees).
//
// A JSON answer is kept whole (up to maxResponseBytes). An event stream goes to the client event by
// event, each one held back until the next arrives: the last event is written only once the record
// is settled, so a client that has seen the end of the stream always finds it stored. Every event's
// data is captured, and the stream is stored as those events, one JSON text a line (JSON-RPC
// events without their id: each retry gets its own). A replay writes them back as events.
//
//   JSON-RPC     result ─► store    error ─► release (the agent refused; a retry may run)
//   HTTP+JSON    2xx ─► store       4xx, or a status the route releases ─► release
//   event stream ended ─┬─ holds a result (any event of HTTP+JSON) ─► store, error events included
//                       ├─ only JSON-RPC errors ─────────────────────► release
//                       └─ no event ─────────────────────────────────► unknown outcome
//   5xx, or a JSON-RPC answer with no response under the request's id ► unknown outcome
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import type { IdempotencyPolicy } from '../config/types';
import { ProxyError } from '../errors';
import { responseHeaderPairs, writeWhole } from '../http/response';
import {
  canonicalizeAt,
  hasValueAt,
  parseJson,
  type ParsedJson,
} from '../idempotency/canonical-json';
import { JSON_HEADERS, storedMessage } from '../jsonrpc/jsonrpc';
import { SseReader } from '../jsonrpc/event-stream';
import type { Settlement } from '../protected/decide';
import { startStreaming, writeChunk } from '../protected/outgoing';
import { StreamCapture } from '../protected/stream-capture';
import type { AnswerReceiver } from '../protected/protocol';
import type { HeaderPairs, StoredResponse } from '../store/record';
import { a2aProblem, REST_HEADERS, restErrorBody, rpcErrorMessage, rpcErrorObject } from './errors';

export const EVENT_STREAM = 'text/event-stream';
const ID = ['id'];
const RESULT = ['result'];
const ERROR = ['error'];

/** A protected send as its answer needs it. */
export interface SendPlace {
  readonly route: string;
  readonly key: string;
  readonly policy: IdempotencyPolicy;
  /** The request's JSON-RPC id as JSON text; undefined on HTTP+JSON. */
  readonly idText: string | undefined;
}

export class SendAnswer implements AnswerReceiver {
  status = 0;
  streaming = false;
  settled = false;
  private headers: HeaderPairs = [];
  private contentLength: string | string[] | undefined;
  private events: SseReader | undefined;
  /** Bytes since the last event with data, that event included: written when the next one comes. */
  private held: Buffer[] = [];
  /** Each event's stored line (JSON-RPC: the message without its id). */
  private lines: string[] = [];
  private results = 0;
  /** Bytes of the event stream's stored lines, kept or not. */
  private total = 0;
  /** A JSON answer as it arrives (protected/stream-capture.ts). */
  private readonly kept: StreamCapture;

  constructor(
    private readonly res: ServerResponse,
    private readonly place: SendPlace,
    readonly close: () => void,
  ) {
    this.kept = new StreamCapture(place.policy.maxResponseBytes);
  }

  head(status: number, headers: IncomingHttpHeaders): void {
    this.status = status;
    this.headers = responseHeaderPairs(headers, { keepSetCookie: true });
    this.contentLength = headers['content-length'];
    if (status >= 200 && status < 300 && isEventStream(headers['content-type'])) {
      this.events = new SseReader();
      this.streaming = true;
      startStreaming(this.res, status, this.headers, undefined);
    }
  }

  data(chunk: Buffer): Promise<void> | undefined {
    if (this.events === undefined) return this.keep(chunk);
    let written: Promise<void> | undefined;
    for (const event of this.events.push(chunk)) {
      if (event.data === undefined) {
        // A comment or keep-alive: after a held event it waits with it, to keep the order.
        if (this.held.length > 0) this.held.push(event.bytes);
        else written = writeChunk(this.res, event.bytes) ?? written;
        continue;
      }
      for (const bytes of this.held) written = writeChunk(this.res, bytes) ?? written;
      this.held = [event.bytes];
      this.capture(event.data);
    }
    return written;
  }

  settlement(): Settlement {
    const status = this.status;
    if ((status >= 300 && status < 500) || !this.policy.storesStatus(status))
      return { kind: 'release' };
    if (status >= 500)
      return this.unknown(
        `The A2A agent answered HTTP ${status} without a response to the message, so it may have acted on it.`,
      );
    if (this.events !== undefined) return this.streamSettlement();
    if (this.streaming) return this.notStored(this.kept.total);
    const body = this.body();
    if (this.place.idText === undefined) return stored(this.status, this.storedHeaders(), body);
    const message = safeParse(body);
    if (message === null || canonicalizeAt(message, ID) !== this.place.idText)
      return this.unknown(
        'The A2A agent answered without a JSON-RPC response to the message, so it may have acted on it.',
      );
    if (hasValueAt(message, ERROR)) return { kind: 'release' };
    const result = canonicalizeAt(message, RESULT);
    if (result === undefined)
      return this.unknown('The A2A agent’s JSON-RPC response has no result.');
    return stored(200, this.storedHeaders(), storedMessage('result', result));
  }

  end(): void {
    if (this.res.destroyed) return;
    if (!this.streaming) {
      writeWhole(this.res, this.status, this.headers, this.body());
      return;
    }
    for (const bytes of this.held) this.res.write(bytes);
    this.held = [];
    if (this.events !== undefined) this.res.write(this.events.rest());
    this.res.end();
  }

  /** A stream that broke off gets the error as its last event (only whole events were sent). */
  endBroken(error: ProxyError): void {
    if (this.res.destroyed) return;
    if (this.events === undefined) {
      this.res.destroy();
      return;
    }
    for (const bytes of this.held) this.res.write(bytes);
    const problem = a2aProblem(error, true);
    const { idText } = this.place;
    const data = idText === undefined ? restErrorBody(problem) : rpcErrorMessage(idText, problem);
    this.res.end(`event: error\ndata: ${data}\n\n`);
  }

  private get policy(): IdempotencyPolicy {
    return this.place.policy;
  }

  /** One event's data as its record keeps it; what is not a response to this send is not kept. */
  private capture(data: string): void {
    if (this.place.idText === undefined) {
      const event = safeParse(data);
      if (event === null) return;
      // An HTTP+JSON error event is {"error": …}: the agent refused, unless results came before.
      if (!hasValueAt(event, ERROR)) this.results += 1;
      this.remember(canonicalizeAt(event, [])!);
      return;
    }
    const message = safeParse(data);
    if (message === null || canonicalizeAt(message, ID) !== this.place.idText) return;
    const member = hasValueAt(message, RESULT)
      ? 'result'
      : hasValueAt(message, ERROR)
        ? 'error'
        : undefined;
    if (member === undefined) return;
    if (member === 'result') this.results += 1;
    this.remember(storedMessage(member, canonicalizeAt(message, [member])!).toString());
  }

  private remember(line: string): void {
    this.total += Buffer.byteLength(line) + 1;
    if (this.total <= this.policy.maxResponseBytes) this.lines.push(line);
  }

  private streamSettlement(): Settlement {
    if (this.lines.length === 0 && this.total === 0)
      return this.unknown(
        'The A2A agent’s event stream ended before any event, so it may have acted on the message.',
      );
    if (this.results === 0) return { kind: 'release' }; // only errors: the agent refused it
    if (this.total > this.policy.maxResponseBytes) return this.notStored(this.total);
    return stored(200, [['content-type', EVENT_STREAM]], Buffer.from(this.lines.join('\n')));
  }

  private unknown(detail: string): Settlement {
    const error = new ProxyError('UPSTREAM_CONNECTION_LOST', detail, {
      route: this.place.route,
      key: this.place.key,
    });
    return { kind: 'unknown', error };
  }

  /** A JSON answer, kept up to maxResponseBytes; a larger one streams to the client as it comes. */
  private keep(chunk: Buffer): Promise<void> | undefined {
    if (this.kept.add(chunk)) return undefined;
    const earlier = this.kept.takeOverflowed();
    if (!this.streaming) {
      this.streaming = true;
      startStreaming(this.res, this.status, this.headers, this.contentLength);
      for (const kept of earlier) this.res.write(kept);
    }
    return writeChunk(this.res, chunk);
  }

  private body(): Buffer {
    return this.kept.body();
  }

  /** The answer's Content-Type only: the rest of the agent's head is not what a retry needs. */
  private storedHeaders(): HeaderPairs {
    return this.headers.filter(([name]) => name === 'content-type');
  }

  /** What retries get for an answer the agent gave but the route would not keep. */
  private notStored(size: number): Settlement {
    const error = new ProxyError(
      'UPSTREAM_CONNECTION_LOST',
      `The agent acted on the message once, but its answer (${size} bytes) was larger than this route's maxResponseBytes (${this.policy.maxResponseBytes}), so it was not stored and cannot be replayed. It will not run again with this messageId; raise maxResponseBytes to keep such answers.`,
      { route: this.place.route, key: this.place.key },
    );
    const problem = { ...a2aProblem(error), reason: 'IDEMPOTENCY_RESULT_NOT_STORED' };
    if (this.place.idText === undefined)
      return stored(502, REST_HEADERS, Buffer.from(restErrorBody(problem)));
    return stored(
      200,
      JSON_HEADERS,
      storedMessage('error', JSON.stringify(rpcErrorObject(problem))),
    );
  }
}

function stored(status: number, headers: HeaderPairs, body: Buffer): Settlement {
  const response: StoredResponse = {
    status,
    headers,
    body,
    bodyOmitted: false,
    outcomeUnknown: false,
  };
  return { kind: 'complete', response };
}

function safeParse(text: string | Buffer): ParsedJson | null {
  try {
    return parseJson(text);
  } catch {
    return null; // a duplicate key: not something the proxy can store faithfully
  }
}

export function isEventStream(contentType: string | undefined): boolean {
  return contentType?.split(';')[0]?.trim().toLowerCase() === EVENT_STREAM;
}
