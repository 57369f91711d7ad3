// The MCP protocol (src/mcp/README.md): how a POST on an MCP route is read into a protected
// tools/call, and how the proxy's answers are written — as JSON-RPC, under each caller's own id.
//
//   body ─┬─ unreadable (../jsonrpc/read-body.ts) ──────────► refused, never forwarded
//         └─ message ─┬─ not a protected tools/call ─────────► passed (the pipeline forwards it)
//                     ├─ tasks/get, tasks/cancel (mcp.tasks) ─► answered from the record (tasks.ts)
//                     ├─ cancel of a call running here ───────► held (202): the call finishes
//                     ├─ batch with a call, call without id ──► refused (-32600)
//                     └─ protected tools/call ─► key (header | key.body | params.idempotencyKey
//                                                     | derived, unless key.body is required)
//                                              ─► the call, run by the pipeline like a REST one
//                                                 (a task, for a client that takes one: tasks.ts)
import type { ServerResponse } from 'node:http';
import { ProxyError } from '../errors';
import { writeWhole } from '../http/response';
import { missingKeyDetail } from '../idempotency/body-key';
import { derivedKeyPolicy } from '../idempotency/derived-key';
import { keyHeaderLines } from '../idempotency/key';
import { INVALID_REQUEST, JSON_HEADERS, withId } from '../jsonrpc/jsonrpc';
import { type BodyRefusal, readMcpBody } from '../jsonrpc/read-body';
import { CLIENT_LEFT, passedWithSentKey, replayMarks } from '../jsonrpc/verdicts';
import {
  type Call,
  expiresHeader,
  OUTCOME_HEADER,
  type ProtectedRequest,
  type ProtocolAdapter,
  readsWithPromises,
  recordIdOf,
  type Verdict,
} from '../protected/protocol';
import { attachClient } from '../protected/attach';
import type { StoredResponse } from '../store/record';
import {
  jsonRpcError,
  storedUnknownOutcome,
  withRetryAfterData,
  writeJsonRpcError,
  writeTransportError,
} from './errors';
import { callPlaceOf, type InFlightToolCalls, sessionOf } from './in-flight-calls';
import { toolProbe } from './reconcile-probe';
import {
  declaresTasks,
  readTaskMessage,
  taskDeferral,
  taskPolicy,
  writeCreateTaskResult,
} from './tasks';
import { ToolCallAnswer } from './tool-call-answer';
import {
  derivedToolCallKey,
  readMcpMessage,
  sentToolCallKey,
  toolCallFingerprint,
} from './tool-call';

/** A protected tools/call: a call, and the JSON-RPC id its answers go under. */
export interface ToolCall extends Call {
  readonly tool: string;
  /** The request's JSON-RPC id as JSON text (`7`, `"abc"`). */
  readonly idText: string;
}

/**
 * The MCP adapter over `toolCalls`, the calls this process is forwarding: a client's cancel of
 * one of them is held, so the call finishes and its result is stored for the retry.
 */
export function mcpAdapter(toolCalls: InFlightToolCalls): ProtocolAdapter<ToolCall> {
  return {
    name: 'mcp',
    serves: (policy) => Boolean(policy.mcp),
    read: readsWithPromises((request) => readToolCall(request, toolCalls)),
    replay: (request, call, stored, replayed) =>
      writeStoredMessage(request, call, stored, replayed),
    refuse(request, call, error) {
      writeJsonRpcError(request.res, call.idText, jsonRpcError(error));
    },
    unknownOutcome: (_call, error) => storedUnknownOutcome(error, OUTCOME_HEADER),
    reusedDetail:
      'This key was already used for a call with another tool or other arguments. Use a new key for a new call, or resend the original call unchanged to get its stored result.',
    receive(request, call, settle, live) {
      // The record's own scope and tenant: a cancel is held only for the caller whose call this is.
      const place = {
        scope: call.id.scope,
        tenant: call.id.tenant,
        session: sessionOf(request.req.headers),
      };
      toolCalls.add(place, call.idText);
      const where = { route: request.route.name, key: call.id.key, policy: call.policy };
      return new ToolCallAnswer(
        request.res,
        { ...where, idText: call.idText },
        settle,
        () => toolCalls.delete(place, call.idText),
        live,
        call.deferral !== undefined,
      );
    },
    deferred(request, call, handle) {
      writeCreateTaskResult(
        request.res,
        call.idText,
        handle,
        call.id.key,
        request.policy.mcp!.tasks!,
      );
    },
    attach(request, call, live) {
      // The first call's events so far, then the rest live, then its final message under this
      // caller's own id.
      const marks = replayMarks(request, call, false);
      return attachClient(
        request,
        live,
        (headers) => [...headers.filter(([name]) => name !== 'set-cookie'), ...marks],
        (final) =>
          final === undefined
            ? undefined
            : Buffer.from(`event: message\ndata: ${withId(final, call.idText).toString()}\n\n`),
      );
    },
    probe: toolProbe,
  };
}

type Refusal = Extract<Verdict<ToolCall>, { kind: 'refuse' }>;

/** A JSON-RPC error under `idText`, answered by the pipeline. */
function rpcRefusal(
  idText: string,
  error: Parameters<typeof writeJsonRpcError>[2],
  outcome: Refusal['outcome'],
): Refusal {
  return { kind: 'refuse', outcome, answer: (res) => writeJsonRpcError(res, idText, error) };
}

async function readToolCall(
  request: ProtectedRequest,
  toolCalls: InFlightToolCalls,
): Promise<Verdict<ToolCall>> {
  const { req, route, policy } = request;
  const mcp = policy.mcp!;
  const read = await readMcpBody(req, policy.maxRequestBytes);
  // The client went away mid-body: nothing to answer.
  if (read.kind === 'gone') return CLIENT_LEFT;
  if (read.kind === 'refused') return refuseBody(read.refusal, read.unread);
  // The upstream gets the bytes that were read, inflated: the header described the bytes as sent.
  if (read.decoded) delete req.headers['content-encoding'];
  const body = read.body;

  // A route that serves tasks answers the messages about them itself.
  if (mcp.tasks !== null) {
    const task = readTaskMessage(request, read.parsed, body, mcp.tasks);
    if (task !== undefined) return task;
  }
  const message = readMcpMessage(read.parsed, mcp);
  switch (message.kind) {
    case 'pass':
      return passedWithSentKey(body);
    case 'cancel':
      if (!toolCalls.has(callPlaceOf(policy, req.headers), message.requestIdText))
        return passedWithSentKey(body);
      return { kind: 'refuse', outcome: { label: 'cancel_held' }, answer: holdCancel };
    case 'batch-with-call':
    case 'notification-call': {
      const error = {
        code: INVALID_REQUEST,
        message:
          message.kind === 'batch-with-call'
            ? `The batch contains a tools/call for "${message.tool}", which runs at most once through this proxy; batches cannot be, so send each tools/call as a message of its own.`
            : `The tools/call for "${message.tool}" has no id, so nothing would come back to store or replay; send it as a request with an id.`,
        data: { type: 'idempotency_call_not_supported' },
      };
      return rpcRefusal('null', error, { label: 'bad_request', tool: message.tool });
    }
  }

  const { call, parsed } = message;
  const sent = sentToolCallKey(
    keyHeaderLines(req, policy.key.header),
    parsed,
    policy.key,
    policy.key.header,
  );
  if (sent !== undefined && !sent.ok) {
    const error = new ProxyError('IDEMPOTENCY_KEY_INVALID', sent.detail, { route: route.name });
    return rpcRefusal(call.idText, jsonRpcError(error), { label: 'invalid_key', tool: call.tool });
  }
  // A route that names where its protocol puts the key (key.body) requires it unless told not to;
  // without key.body a call without a key is keyed by its tool and arguments.
  if (sent === undefined && policy.key.body !== null && policy.key.required) {
    const detail = missingKeyDetail(policy.key);
    const error = new ProxyError('IDEMPOTENCY_KEY_MISSING', detail, { route: route.name });
    return rpcRefusal(call.idText, jsonRpcError(error), { label: 'missing_key', tool: call.tool });
  }
  const key = sent?.key ?? derivedToolCallKey(call, parsed, mcp);
  // A derived key's record lives for key.window instead of ttl.
  const keyPolicy = sent === undefined ? derivedKeyPolicy(policy) : policy;
  // A client that takes tasks may get one (mcp.tasks): its record lives for mcp.tasks.ttl.
  const tasks = mcp.tasks !== null && declaresTasks(parsed) ? mcp.tasks : null;
  const callPolicy = tasks === null ? keyPolicy : taskPolicy(keyPolicy, tasks);
  const toolCall: ToolCall = {
    id: recordIdOf(request, callPolicy, key),
    policy: callPolicy,
    keyDerived: sent === undefined,
    fingerprint: toolCallFingerprint(call, parsed, mcp),
    body,
    tool: call.tool,
    idText: call.idText,
    deferral: tasks === null ? undefined : taskDeferral(tasks),
  };
  return { kind: 'protect', call: toolCall };
}

/** A cancel of a call running here is held: the call finishes and its result is stored. */
function holdCancel(res: ServerResponse): void {
  res.writeHead(202, { 'content-length': '0' });
  res.end();
}

/** A body the proxy could not read: answered, never forwarded, whatever it might have been. */
function refuseBody(refusal: BodyRefusal, unread: boolean): Verdict<ToolCall> {
  const data: Record<string, unknown> = { type: refusal.type };
  if (refusal.errorCode !== undefined) data.code = refusal.errorCode;
  return {
    kind: 'refuse',
    outcome: { label: refusal.status === 413 ? 'too_large' : 'bad_request' },
    answer: (res) => {
      // The unread rest of a body over the limit would be parsed as the next request.
      if (unread) res.shouldKeepAlive = false;
      writeTransportError(res, refusal.status, {
        code: refusal.code,
        message: refusal.message,
        data,
      });
    },
  };
}

/**
 * A stored tool result (or stored unknown outcome) under this caller's JSON-RPC id; marked as a
 * replay when it is one (not to the request that made it).
 */
function writeStoredMessage(
  request: ProtectedRequest,
  call: ToolCall,
  stored: StoredResponse,
  replayed: boolean,
): void {
  const extra = replayed ? replayMarks(request, call, stored.bodyOmitted) : [];
  // What the stored answer says of its outcome (unknown, or reconciled with the upstream) and, for
  // an unknown one on a route that probes, when to retry (docs/reconcile.md).
  const said = stored.headers.filter(([name]) => name === OUTCOME_HEADER || name === 'retry-after');
  const headers =
    stored.outcomeUnknown && !said.some(([name]) => name === OUTCOME_HEADER)
      ? [...JSON_HEADERS, [OUTCOME_HEADER, 'unknown'] as const, ...said]
      : said.length > 0
        ? [...JSON_HEADERS, ...said]
        : JSON_HEADERS;
  const expires = expiresHeader(stored.expiresAt);
  const all = expires.length === 0 ? extra : [...extra, ...expires];
  // A JSON-RPC client reads the body, not the headers: Retry-After goes in data too, as a 409's.
  const retryAfter = said.find(([name]) => name === 'retry-after')?.[1];
  const body =
    stored.outcomeUnknown && retryAfter !== undefined && /^\d+$/.test(retryAfter)
      ? withRetryAfterData(stored.body, Number(retryAfter))
      : stored.body;
  writeWhole(request.res, 200, headers, withId(body, call.idText), all);
}
