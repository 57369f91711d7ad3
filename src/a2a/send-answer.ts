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
import type { ServerResponse } from 'node:http';
import type { IdempotencyPolicy } from '../config/types';
import { ProxyError } from '../errors';
import { canonicalizeAt, hasValueAt } from '../idempotency/canonical-json';
import {
  EVENT_STREAM,
  JsonOrEventStreamAnswer,
  parsedOrNull,
  storedAnswer,
} from '../jsonrpc/answer';
import { JSON_HEADERS, storedMessage } from '../jsonrpc/jsonrpc';
import type { Settlement } from '../protected/decide';
import { writeChunk } from '../protected/outgoing';
import type { HeaderPairs } from '../store/record';
import { a2aProblem, REST_HEADERS, restErrorBody, rpcErrorMessage, rpcErrorObject } from './errors';

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

export class SendAnswer extends JsonOrEventStreamAnswer {
  /** Each event's stored line (JSON-RPC: the message without its id). */
  private lines: string[] = [];
  private results = 0;
  /** Bytes of the event stream's stored lines, kept or not. */
  private total = 0;

  constructor(
    res: ServerResponse,
    private readonly place: SendPlace,
    close: () => void,
  ) {
    super(res, place, close);
  }

  // `held`: the bytes since the last event with data, that event included, written when the next
  // one comes.
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

  protected failedStatusDetail(status: number): string {
    return `The A2A agent answered HTTP ${status} without a response to the message, so it may have acted on it.`;
  }

  protected endedSettlement(): Settlement {
    if (this.events !== undefined) return this.streamSettlement();
    if (this.streaming) return this.notStored(this.kept.total);
    const body = this.body();
    if (this.place.idText === undefined)
      return storedAnswer(this.status, this.storedHeaders(), body);
    const message = parsedOrNull(body);
    if (message === null || canonicalizeAt(message, ID) !== this.place.idText)
      return this.unknown(
        'The A2A agent answered without a JSON-RPC response to the message, so it may have acted on it.',
      );
    if (hasValueAt(message, ERROR)) return { kind: 'release' };
    const result = canonicalizeAt(message, RESULT);
    if (result === undefined)
      return this.unknown('The A2A agent’s JSON-RPC response has no result.');
    return storedAnswer(200, this.storedHeaders(), storedMessage('result', result));
  }

  end(): void {
    this.writeEnd([], true);
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

  /** One event's data as its record keeps it; what is not a response to this send is not kept. */
  private capture(data: string): void {
    if (this.place.idText === undefined) {
      const event = parsedOrNull(data);
      if (event === null) return;
      // An HTTP+JSON error event is {"error": …}: the agent refused, unless results came before.
      if (!hasValueAt(event, ERROR)) this.results += 1;
      this.remember(canonicalizeAt(event, [])!);
      return;
    }
    const message = parsedOrNull(data);
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
    return storedAnswer(200, [['content-type', EVENT_STREAM]], Buffer.from(this.lines.join('\n')));
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
      return storedAnswer(502, REST_HEADERS, Buffer.from(restErrorBody(problem)));
    return storedAnswer(
      200,
      JSON_HEADERS,
      storedMessage('error', JSON.stringify(rpcErrorObject(problem))),
    );
  }
}
