// The A2A protocol (src/a2a/README.md): how a POST on an A2A route is read into a protected send,
// and how the proxy's answers are written — JSON-RPC under each caller's own id, or HTTP+JSON as
// the agent gave them.
//
//   body ─┬─ unreadable (../jsonrpc/read-body.ts) ──► refused, never forwarded
//         └─ message ─┬─ not a send ────────────────► passed (the pipeline forwards it)
//                     ├─ batch with a send, no id, ─► refused (-32600, -32602)
//                     │  no messageId
//                     └─ send ─► key (header | message.messageId) ─► the pipeline, as any call
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import { ProxyError } from '../errors';
import { writeWhole } from '../http/response';
import { keyHeaderLines, parseIdempotencyKey } from '../idempotency/key';
import { JSON_HEADERS, withId } from '../jsonrpc/jsonrpc';
import { type BodyRefusal, readMcpBody } from '../jsonrpc/read-body';
import { CLIENT_LEFT, passedWithSentKey, replayMarks } from '../jsonrpc/verdicts';
import {
  type Call,
  OUTCOME_HEADER,
  type ProtectedRequest,
  type ProtocolAdapter,
  readsWithPromises,
  recordIdOf,
  type Verdict,
} from '../protected/protocol';
import type { StoredResponse } from '../store/record';
import {
  type A2aProblem,
  a2aProblem,
  storedUnknown,
  writeRestError,
  writeRpcError,
} from './errors';
import { EVENT_STREAM, isEventStream } from '../jsonrpc/answer';
import { SendAnswer } from './send-answer';
import {
  type A2aSendRequest,
  isRestSendPath,
  messageIdOf,
  readA2aMessage,
  sendFingerprint,
} from './send';

/** A protected send: a call, and how its answers are written. */
export interface A2aCall extends Call {
  readonly send: A2aSendRequest;
}

export const A2A: ProtocolAdapter<A2aCall> = {
  name: 'a2a',
  serves: (policy) => Boolean(policy.a2a),
  read: readsWithPromises(readSend),
  replay: (request, call, stored, replayed) => writeStored(request, call, stored, replayed),
  refuse(request, call, error) {
    refuseSend(request.res, call.send, a2aProblem(error));
  },
  unknownOutcome: (call, error) =>
    storedUnknown(call.send.binding === 'jsonrpc', error, OUTCOME_HEADER),
  reusedDetail:
    'This messageId was already sent with another message (other parts, context, task or metadata) or through another method. Give a new message a new messageId, or resend the original message unchanged to get its stored answer.',
  // The pipeline settles the claim once the answer has ended: the last event waits for that.
  receive(request, call) {
    const place = {
      route: request.route.name,
      key: call.id.key,
      policy: call.policy,
      idText: call.send.idText,
    };
    return new SendAnswer(request.res, place, () => undefined);
  },
};

async function readSend(request: ProtectedRequest): Promise<Verdict<A2aCall>> {
  const { req, route, policy, target } = request;
  const read = await readMcpBody(req, policy.maxRequestBytes);
  // The client went away mid-body: nothing to answer.
  if (read.kind === 'gone') return CLIENT_LEFT;
  const restSend = isRestSendPath(target.path);
  if (read.kind === 'refused') {
    // An empty body cannot be a send (HTTP+JSON's POST /tasks/{id}:cancel has none).
    if (!restSend && read.refusal.type === 'json_invalid' && hasNoBody(req.headers))
      return passedWithSentKey(Buffer.alloc(0));
    return refuseBody(restSend, read.refusal, read.unread);
  }
  // The upstream gets the bytes that were read, inflated: the header described the bytes as sent.
  if (read.decoded) delete req.headers['content-encoding'];
  const body = read.body;
  const message = readA2aMessage(target.path, read.parsed);
  if (message.kind === 'pass') return passedWithSentKey(body);
  if (message.kind === 'refuse') {
    const problem: A2aProblem = {
      status: 400,
      rpcCode: message.code,
      reason: message.reason,
      message: message.message,
      metadata: {},
    };
    const { rpc, idText } = message;
    return {
      kind: 'refuse',
      outcome: { label: 'bad_request' },
      answer: (res) =>
        rpc ? writeRpcError(res, idText ?? 'null', problem) : writeRestError(res, problem),
    };
  }
  const { send } = message;
  const headerLines = keyHeaderLines(req, policy.key.header);
  const parsedKey =
    headerLines !== undefined
      ? parseIdempotencyKey(headerLines, policy.key.maxLength, policy.key.header)
      : parseIdempotencyKey([messageIdOf(send)!], policy.key.maxLength, 'message.messageId');
  if (!parsedKey.ok) {
    const error = new ProxyError('IDEMPOTENCY_KEY_INVALID', parsedKey.detail, {
      route: route.name,
    });
    const problem = a2aProblem(error);
    // A messageId the proxy cannot key on is the message's params that are invalid.
    const said = headerLines === undefined ? { ...problem, rpcCode: -32602 } : problem;
    return {
      kind: 'refuse',
      outcome: { label: 'invalid_key' },
      answer: (res) => refuseSend(res, send, said),
    };
  }
  const call: A2aCall = {
    id: recordIdOf(request, policy, parsedKey.key),
    policy,
    keyDerived: false,
    fingerprint: sendFingerprint(send),
    body,
    send,
  };
  return { kind: 'protect', call };
}

function refuseSend(res: ServerResponse, send: A2aSendRequest, problem: A2aProblem): void {
  if (send.binding === 'jsonrpc') writeRpcError(res, send.idText, problem);
  else writeRestError(res, problem);
}

/** A body the proxy could not read: answered, never forwarded, whatever it might have been. */
function refuseBody(restSend: boolean, refusal: BodyRefusal, unread: boolean): Verdict<A2aCall> {
  const metadata: Record<string, string> = {};
  if (refusal.errorCode !== undefined) metadata.code = refusal.errorCode;
  const problem: A2aProblem = {
    status: refusal.status,
    rpcCode: refusal.code,
    reason: refusal.type.toUpperCase(),
    message: BODY_MESSAGES[refusal.type] ?? refusal.message,
    metadata,
  };
  return {
    kind: 'refuse',
    outcome: { label: refusal.status === 413 ? 'too_large' : 'bad_request' },
    answer: (res) => {
      // The unread rest of a body over the limit would be parsed as the next request.
      if (unread) res.shouldKeepAlive = false;
      if (restSend) writeRestError(res, problem);
      else writeRpcError(res, undefined, problem);
    },
  };
}

/** The body reader's refusals, told in A2A's words (its own speak of MCP tools). */
const BODY_MESSAGES: Readonly<Record<string, string>> = {
  content_encoding_unsupported:
    'Unsupported Media Type: the message is sent with a Content-Encoding the proxy cannot decode, so it cannot tell whether it is a message to the agent. Send it uncompressed, or as gzip, deflate or br.',
  charset_unsupported:
    'Unsupported Media Type: A2A messages are UTF-8 JSON, and this one says another charset (or a Content-Type that cannot be parsed). Send it as UTF-8 (charset=utf-8, or no charset).',
  json_not_utf8:
    'Parse error: the message is not valid UTF-8, so the proxy cannot tell which message the agent would read. Send it encoded as UTF-8.',
  json_invalid:
    'Parse error: the body is not JSON. Send one JSON-RPC request (or an HTTP+JSON SendMessageRequest) as a JSON document.',
  json_duplicate_key:
    'Invalid Request: the body has an object with the same key twice, which parsers read differently, so the proxy cannot know which message the agent would act on. Send each key once.',
};

/** A stored answer, under this caller's JSON-RPC id where it has one; a stream as events. */
function writeStored(
  request: ProtectedRequest,
  call: A2aCall,
  stored: StoredResponse,
  replayed: boolean,
): void {
  const { res } = request;
  // Marked as a replay when it is one (not to the request that made it).
  const extra = replayed ? replayMarks(request, call, stored.bodyOmitted) : [];
  const { idText } = call.send;
  const contentType = stored.headers.find(([name]) => name === 'content-type')?.[1];
  if (isEventStream(contentType)) {
    const lines = stored.body.length === 0 ? [] : stored.body.toString().split('\n');
    const events = lines.map(
      (line) =>
        `data: ${idText === undefined ? line : withId(Buffer.from(line), idText).toString()}\n\n`,
    );
    writeWhole(
      res,
      200,
      [
        ['content-type', EVENT_STREAM],
        ['cache-control', 'no-cache'],
      ],
      Buffer.from(events.join('')),
      extra,
    );
    return;
  }
  const body = idText === undefined ? stored.body : withId(stored.body, idText);
  const headers = stored.headers.length > 0 ? stored.headers : JSON_HEADERS;
  writeWhole(res, stored.status, headers, body, extra);
}

/** True when the request has no body: no Content-Length (or 0) and no Transfer-Encoding. */
function hasNoBody(headers: IncomingHttpHeaders): boolean {
  const length = headers['content-length'];
  return headers['transfer-encoding'] === undefined && (length === undefined || length === '0');
}
