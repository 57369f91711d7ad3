// Takes an MCP server's answer to a protected tools/call as it arrives (src/mcp/README.md). An
// event stream goes to the client event by event (progress notifications included) while the proxy
// looks for the final JSON-RPC response with the call's id; that event is held back until the
// record is settled, so a client that has the result always finds it stored. A JSON answer is kept
// whole.
//
//   final response ─┬─ result ───────────────────► store (isError: true too: the tool ran)
//                   ├─ result, input_required ───► release (the tool asks first; nothing ran)
//                   └─ error ────────────────────► release; stored once the client has a task
//   no final response ─┬─ HTTP 3xx/4xx, or a status the route releases ► release
//                      └─ 2xx or 5xx (the stream dropped, the server failed) ► unknown outcome
import type { ServerResponse } from 'node:http';
import type { IdempotencyPolicy } from '../config/types';
import type { ProxyError } from '../errors';
import {
  canonicalizeAt,
  hasValueAt,
  type ParsedJson,
  stringAt,
} from '../idempotency/canonical-json';
import { JsonOrEventStreamAnswer, parsedOrNull, storedAnswer } from '../jsonrpc/answer';
import type { SseEvent } from '../jsonrpc/event-stream';
import {
  errorMessage,
  JSON_HEADERS,
  type JsonRpcErrorObject,
  storedMessage,
} from '../jsonrpc/jsonrpc';
import type { Settlement } from '../protected/decide';
import { writeChunk } from '../protected/outgoing';
import { expiresHeader } from '../protected/protocol';
import { StreamCapture } from '../protected/stream-capture';
import type { LiveAnswer } from '../store/live-answer';
import type { PartialAnswer } from '../store/record';
import { jsonRpcError } from './errors';

/** A protected tools/call as its answers need it: where it runs and under which JSON-RPC id. */
export interface ToolCallPlace {
  readonly route: string;
  readonly key: string;
  readonly policy: IdempotencyPolicy;
  /** The request's JSON-RPC id as JSON text (`7`, `"abc"`). */
  readonly idText: string;
}

const ID = ['id'];
const NOTHING_KEPT = Buffer.alloc(0);
const RESULT = ['result'];
const RESULT_TYPE = ['result', 'resultType'];
const ERROR = ['error'];
const METHOD = ['method'];

export class ToolCallAnswer extends JsonOrEventStreamAnswer {
  private found = false;
  /** Under attach: the event-stream bytes passed on so far, for a repeat that attaches late. */
  private passed: StreamCapture | undefined;
  /** Under attach: the final message without its id, for the attached repeats. */
  private finalForRepeats: Buffer | undefined;
  /** Body bytes received: what an answer that broke off had sent (its partial answer). */
  private received = 0;
  /** Its client was answered with a task (detach). */
  private deferred = false;

  constructor(
    res: ServerResponse,
    private readonly call: ToolCallPlace,
    /** Stores or releases the record; must not reject. */
    private readonly settle: (settlement: Settlement) => Promise<void>,
    close: () => void,
    /** Under onConcurrent: attach, where the event stream is published for this key's repeats. */
    private readonly live?: LiveAnswer,
    /** The call may be answered as a task (mcp/tasks.ts): its stream is held back meanwhile. */
    mayBeDeferred = false,
  ) {
    super(res, call, close, mayBeDeferred);
  }

  /**
   * Once its client has a task, a JSON-RPC error from the tool is stored rather than released: the
   * task must end `failed` with it, on every instance, and a retry of the call gets the same.
   */
  override detach(): void {
    super.detach();
    this.deferred = true;
  }

  protected override streamStarted(status: number): void {
    if (this.live === undefined) return;
    this.passed = new StreamCapture(this.policy.maxResponseBytes);
    this.live.open({ status, headers: this.headers }, this.passed);
  }

  data(chunk: Buffer): Promise<void> | undefined {
    this.received += chunk.length;
    if (this.settled) return writeChunk(this.res, chunk);
    if (this.found) {
      this.held.push(chunk);
      return undefined;
    }
    if (this.events === undefined) return this.keep(chunk);
    let written: Promise<void> | undefined;
    let verdict: Settlement | undefined;
    for (const event of this.events.push(chunk)) {
      if (verdict !== undefined) {
        this.held.push(event.bytes);
        continue;
      }
      verdict = event.data === undefined ? undefined : this.finalIn(event.data);
      if (verdict !== undefined) this.held.push(event.bytes);
      else {
        this.publish(event);
        written = this.pass(event.bytes) ?? written;
      }
    }
    if (verdict === undefined) return written;
    this.found = true;
    this.held.push(this.events.rest());
    return this.settleThenRelease(verdict, written);
  }

  protected failedStatusDetail(status: number): string {
    return `The MCP server answered HTTP ${status} without a response to the tool call, so the tool may have run.`;
  }

  /** What to do with the record when the answer ended before a final response was found. */
  protected endedSettlement(): Settlement {
    if (this.events !== undefined)
      return this.unknown(
        'The MCP server’s event stream ended before the tool’s response, so the tool may have run.',
      );
    if (this.streaming) return stored(this.notStored(this.kept.total));
    const final = this.finalIn(this.body());
    return (
      final ??
      this.unknown(
        'The MCP server answered without a JSON-RPC response to the tool call, so the tool may have run.',
      )
    );
  }

  /**
   * What arrived before the answer broke off without a final response: a JSON answer's bytes as
   * kept (up to maxResponseBytes); of an event stream only its head and size, since the proxy keeps
   * no copy of the events it passes on (only the final response is stored).
   */
  partial(): PartialAnswer | undefined {
    if (this.status === 0) return undefined;
    const headers = this.policy.replaySetCookie
      ? this.headers
      : this.headers.filter(([name]) => name !== 'set-cookie');
    const body = this.events === undefined ? this.kept.prefix() : NOTHING_KEPT;
    return { status: this.status, headers, body, bytes: this.received };
  }

  /** Finishes the client's answer once the record is settled. */
  end(expiresAt?: number): void {
    this.live?.end(this.finalForRepeats);
    // An event cut off by the end of the stream is passed on as it came (clients drop it).
    this.writeEnd(expiresHeader(expiresAt), !this.found);
  }

  /**
   * Ends an answer that broke off without a final response: an event stream gets the error as its
   * last event (only whole events were passed on, so it cannot merge into one); anything else is
   * cut.
   */
  endBroken(error: ProxyError): void {
    this.live?.fail();
    if (this.res.destroyed) return;
    if (this.events === undefined) {
      this.res.destroy();
      return;
    }
    const message = errorMessage(this.call.idText, jsonRpcError(error, true));
    this.res.end(`event: message\ndata: ${message}\n\n`);
  }

  private async settleThenRelease(
    verdict: Settlement,
    written: Promise<void> | undefined,
  ): Promise<void> {
    try {
      await written;
      await this.settle(verdict);
    } finally {
      this.settled = true;
      this.stopHolding();
      for (const bytes of this.held) if (!this.res.destroyed) this.res.write(bytes);
      this.held = [];
    }
  }

  /**
   * Passes an event the first client got on to the repeats attached to the stream: notifications
   * (progress, logs), not the server's own requests, which only the first caller may answer.
   */
  private publish(event: SseEvent): void {
    if (this.live === undefined || this.passed === undefined) return;
    if (event.data !== undefined) {
      // Not JSON: passed on as the first client got it.
      const message = parsedOrNull(event.data);
      if (message !== null && hasValueAt(message, ID) && hasValueAt(message, METHOD)) return;
    }
    this.passed.add(event.bytes);
    this.live.push(event.bytes);
  }

  /** The settlement if `text` is the JSON-RPC response to this call, else undefined. */
  private finalIn(text: string | Buffer): Settlement | undefined {
    const message = parsedOrNull(text);
    if (message === null || canonicalizeAt(message, ID) !== this.call.idText) return undefined;
    if (this.live !== undefined) this.finalForRepeats = finalForRepeats(message);
    if (hasValueAt(message, ERROR))
      return this.deferred
        ? stored(storedMessage('error', canonicalizeAt(message, ERROR)!))
        : { kind: 'release' };
    if (!hasValueAt(message, RESULT)) return undefined; // a request of the server's own
    if (stringAt(message, RESULT_TYPE) === 'input_required') return { kind: 'release' };
    const size = typeof text === 'string' ? Buffer.byteLength(text) : text.length;
    if (size > this.policy.maxResponseBytes) return stored(this.notStored(size));
    return stored(storedMessage('result', canonicalizeAt(message, RESULT)!));
  }

  /** What retries get for a result the tool produced but the route would not keep. */
  private notStored(size: number): Buffer {
    const error: JsonRpcErrorObject = {
      code: 502,
      message: `The tool ran once, but its result (${size} bytes) was larger than this route's maxResponseBytes (${this.policy.maxResponseBytes}), so it was not stored and cannot be replayed. It will not run again with this key; raise maxResponseBytes to keep such results.`,
      data: { type: 'idempotency_result_not_stored' },
    };
    return storedMessage('error', JSON.stringify(error));
  }
}

/** The final message as each attached repeat gets it, under its own id (withId). */
function finalForRepeats(message: ParsedJson): Buffer | undefined {
  const member = hasValueAt(message, ERROR)
    ? 'error'
    : hasValueAt(message, RESULT)
      ? 'result'
      : undefined;
  if (member === undefined) return undefined;
  return storedMessage(member, canonicalizeAt(message, [member])!);
}

/** A tool's final message as its record keeps it (its id spliced in per caller: ../jsonrpc/jsonrpc.ts). */
function stored(message: Buffer): Settlement {
  return storedAnswer(200, JSON_HEADERS, message);
}
