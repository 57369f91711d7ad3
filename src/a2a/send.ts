// Reading a POST on an A2A route (src/a2a/README.md): is it a send the route protects, and if so
// under which binding, JSON-RPC id, key and fingerprint.
//
//   POST …/message:send, …/message:stream ─────────────► HTTP+JSON send (body: SendMessageRequest)
//   POST anything else ─┬─ empty body ─────────────────► pass
//                       ├─ JSON-RPC send (one message) ► JSON-RPC send (params: SendMessageRequest)
//                       ├─ batch holding a send ───────► refused (-32600)
//                       └─ anything else ──────────────► pass (tasks/get, GetTask, CancelTask, …)
//
// The sends are A2A v1.0's SendMessage / SendStreamingMessage and 0.3's message/send /
// message/stream. The key is the key header when sent, else `message.messageId`, which the spec
// makes the client's id of one message (A2A v1.0 §3.3.1: agents may dedupe on it).
import type { ParsedJson } from '../idempotency/canonical-json';
import { arrayElements, canonicalizeAt, hasValueAt, stringAt } from '../idempotency/canonical-json';
import { FramedHash } from '../idempotency/fingerprint';

/** JSON-RPC methods that send a message, by whether the answer is an event stream. */
const SEND_METHODS: ReadonlyMap<string, boolean> = new Map([
  ['SendMessage', false],
  ['SendStreamingMessage', true],
  ['message/send', false],
  ['message/stream', true],
]);

/** HTTP+JSON send paths end in these (after an optional tenant or `/v1` prefix). */
const REST_SEND = /\/message:(send|stream)$/;

/** A protected send, as the answers need it. */
export interface A2aSendRequest {
  /** JSON-RPC (answers under `idText`) or HTTP+JSON (answers as they came). */
  readonly binding: 'jsonrpc' | 'http+json';
  /** The JSON-RPC method, or the HTTP+JSON path: part of the fingerprint (answers differ by it). */
  readonly operation: string;
  readonly streaming: boolean;
  /** The request's JSON-RPC id as JSON text (`7`, `"abc"`); undefined on HTTP+JSON. */
  readonly idText: string | undefined;
  /** Path to the SendMessageRequest in the body: `params` in JSON-RPC, the body itself in HTTP+JSON. */
  readonly at: readonly string[];
  readonly parsed: ParsedJson;
}

export type A2aMessage =
  | { readonly kind: 'pass' }
  | { readonly kind: 'send'; readonly send: A2aSendRequest }
  /** A send the proxy cannot protect: refused, never forwarded. */
  | {
      readonly kind: 'refuse';
      readonly rpc: boolean;
      readonly idText: string | undefined;
      readonly code: number;
      readonly reason: string;
      readonly message: string;
    };

const PARAMS = ['params'];
const METHOD = ['method'];
const ID = ['id'];

/** True when the path is one of HTTP+JSON's sends (it is claimed whatever its body). */
export function isRestSendPath(path: string): boolean {
  return REST_SEND.test(path);
}

/** What a readable POST body on an A2A route is. */
export function readA2aMessage(path: string, parsed: ParsedJson): A2aMessage {
  const rest = REST_SEND.exec(path);
  if (rest !== null) {
    const send: A2aSendRequest = {
      binding: 'http+json',
      operation: `http+json ${path}`,
      streaming: rest[1] === 'stream',
      idText: undefined,
      at: [],
      parsed,
    };
    return withMessageId(send);
  }
  const batch = arrayElements(parsed);
  if (batch !== undefined) {
    const method = batch.map(sendMethod).find((name) => name !== undefined);
    if (method === undefined) return { kind: 'pass' };
    return refuse(
      true,
      undefined,
      INVALID_REQUEST,
      'IDEMPOTENCY_CALL_NOT_SUPPORTED',
      `The batch contains a ${method}, which runs at most once through this proxy; batches cannot be, so send each message as a request of its own.`,
    );
  }
  const method = sendMethod(parsed);
  if (method === undefined) return { kind: 'pass' };
  if (!hasValueAt(parsed, ID))
    return refuse(
      true,
      undefined,
      INVALID_REQUEST,
      'IDEMPOTENCY_CALL_NOT_SUPPORTED',
      `The ${method} request has no id, so nothing would come back to store or replay; send it as a request with an id.`,
    );
  const send: A2aSendRequest = {
    binding: 'jsonrpc',
    operation: `jsonrpc ${method}`,
    streaming: SEND_METHODS.get(method)!,
    idText: canonicalizeAt(parsed, ID)!,
    at: PARAMS,
    parsed,
  };
  return withMessageId(send);
}

/** JSON-RPC's "Invalid Request" (JSON-RPC 2.0 §5.1). */
export const INVALID_REQUEST = -32600;

function sendMethod(message: ParsedJson): string | undefined {
  const method = stringAt(message, METHOD);
  return method !== undefined && SEND_METHODS.has(method) ? method : undefined;
}

/** A send must carry message.messageId: the spec requires it, and it is what a retry repeats. */
function withMessageId(send: A2aSendRequest): A2aMessage {
  if (messageIdOf(send) !== undefined) return { kind: 'send', send };
  const where = [...send.at, 'message', 'messageId'].join('.');
  return refuse(
    send.binding === 'jsonrpc',
    send.idText,
    -32602,
    'MESSAGE_ID_REQUIRED',
    `Invalid params: ${where} is required (a string): it identifies the message, and a retry of the same message must carry the same one. Send a messageId, such as a UUID, with each new message.`,
  );
}

/** The send's message.messageId, when it is a string. */
export function messageIdOf(send: A2aSendRequest): string | undefined {
  return stringAt(send.parsed, [...send.at, 'message', 'messageId']);
}

/**
 * What a retry must match: the operation (method or path: each answers in its own shape) and the
 * canonical `message` — its messageId, role, parts, contextId, taskId, referenceTaskIds,
 * extensions and metadata — plus the request's `tenant`. `configuration` and the request's own
 * `metadata` are left out: they say how to answer and what to trace, not what the agent is asked.
 */
export function sendFingerprint(send: A2aSendRequest): Buffer {
  const message = canonicalizeAt(send.parsed, [...send.at, 'message']) ?? '';
  const tenant = canonicalizeAt(send.parsed, [...send.at, 'tenant']);
  return new FramedHash('a2a-fingerprint/v1')
    .field(send.operation)
    .optionalList(tenant === undefined ? undefined : [tenant])
    .field(message)
    .digest();
}

function refuse(
  rpc: boolean,
  idText: string | undefined,
  code: number,
  reason: string,
  message: string,
): A2aMessage {
  return { kind: 'refuse', rpc, idText, code, reason, message };
}
