// MCP tasks (the `io.modelcontextprotocol/tasks` extension, revision 2026-07-28; docs/long-calls.md)
// on a route with mcp.tasks, for upstream servers that know nothing of them. The proxy is the
// task's server: the call runs upstream as any protected call, and its record is the task.
//
//   tools/call, the client declares the extension ─► a deferrable call: a task once `after` passes
//                                                     (and to any retry while it runs)
//   tasks/get ─┬─ a client without the extension ─► -32021 (Missing Required Client Capability)
//   tasks/cancel                                  ├─ no such task for this caller ───► -32602
//   tasks/update                                  └─ the task, from its record on any instance
//   initialize, server/discover ─► passed on; the answer's capabilities gain the extension
import type { ServerResponse } from 'node:http';
import type { IdempotencyPolicy, TasksPolicy } from '../config/types';
import type { ProxyError } from '../errors';
import { writeWhole } from '../http/response';
import {
  canonicalizeAt,
  hasValueAt,
  parseJson,
  type ParsedJson,
  stringAt,
} from '../idempotency/canonical-json';
import { isEventStream } from '../jsonrpc/answer';
import { SseReader } from '../jsonrpc/event-stream';
import { JSON_HEADERS, type JsonRpcErrorObject } from '../jsonrpc/jsonrpc';
import {
  type AnswerReshaper,
  type Deferral,
  handleToken,
  OUTCOME_HEADER,
  type ProtectedRequest,
  readHandleToken,
  recordIdOf,
  type Verdict,
} from '../protected/protocol';
import type { Handle, HandleState } from '../store/handles';
import type { StoredResponse } from '../store/record';
import { jsonRpcError, storedUnknownOutcome, writeJsonRpcError } from './errors';

export const TASKS_EXTENSION = 'io.modelcontextprotocol/tasks';
const CLIENT_CAPABILITIES = 'io.modelcontextprotocol/clientCapabilities';
const DECLARED = ['params', '_meta', CLIENT_CAPABILITIES, 'extensions', TASKS_EXTENSION];
const METHOD = ['method'];
const ID = ['id'];
const TASK_ID = ['params', 'taskId'];

/** The extension's codes: a client that did not declare it, and an unknown task (Invalid params). */
const MISSING_CAPABILITY = -32021;
/** A JSON handshake answer is read whole to add the extension; one larger than this is passed on. */
const MAX_HANDSHAKE_BYTES = 1024 * 1024;
const INVALID_PARAMS = -32602;

/** True when a message declares the tasks extension in its per-request capabilities. */
export function declaresTasks(message: ParsedJson): boolean {
  return hasValueAt(message, DECLARED);
}

/** How a tools/call from a client that takes tasks may become one. */
export function taskDeferral(tasks: TasksPolicy): Deferral {
  return { afterMs: tasks.afterMs, joinRunning: true, cancelCheckMs: tasks.pollIntervalMs };
}

/** The policy a call that may become a task runs under: mcp.tasks.ttl as its record's ttl, if set. */
export function taskPolicy(policy: IdempotencyPolicy, tasks: TasksPolicy): IdempotencyPolicy {
  return tasks.ttlMs === null ? policy : { ...policy, ttlMs: tasks.ttlMs };
}

/** A call answered as a task: CreateTaskResult, sent once its record has the handle. */
export function writeCreateTaskResult(
  res: ServerResponse,
  idText: string,
  handle: Handle,
  key: string,
  tasks: TasksPolicy,
): void {
  const task = taskFields(handleToken(handle, key), 'working', handle, handle.createdAt, tasks);
  writeResult(res, idText, { resultType: 'task', ...task });
}

/**
 * What becomes of a message about tasks on a route with mcp.tasks: a poll of one, a refusal, or (for
 * the handshakes) a pass whose answer gains the extension. Undefined for every other message.
 */
export function readTaskMessage(
  request: ProtectedRequest,
  parsed: ParsedJson,
  body: Buffer,
  tasks: TasksPolicy,
): Verdict<never> | undefined {
  const method = stringAt(parsed, METHOD);
  if (method === 'initialize' || method === 'server/discover')
    return {
      kind: 'pass',
      body,
      keyAsSent: true,
      outcome: { label: 'passthrough' },
      reshape: capabilitiesWithTasks,
    };
  if (method !== 'tasks/get' && method !== 'tasks/cancel' && method !== 'tasks/update')
    return undefined;
  const id = canonicalizeAt(parsed, ID) ?? 'null';
  if (!declaresTasks(parsed)) {
    const error = {
      code: MISSING_CAPABILITY,
      message: `Missing required client capability: ${method} needs the ${TASKS_EXTENSION} extension; declare it in the request's capabilities (params._meta["${CLIENT_CAPABILITIES}"].extensions).`,
      data: { requiredCapabilities: { extensions: { [TASKS_EXTENSION]: {} } } },
    };
    return refusal(id, error);
  }
  const taskId = stringAt(parsed, TASK_ID);
  const token = taskId === undefined ? undefined : readHandleToken(taskId);
  if (taskId === undefined || token === undefined) return refusal(id, notFound());
  const { policy } = request;
  return {
    kind: 'poll',
    poll: {
      id: recordIdOf(request, policy, token.key),
      secret: token.secret,
      cancel: method === 'tasks/cancel',
      unknownOutcome: (error: ProxyError) => storedUnknownOutcome(error, OUTCOME_HEADER),
      answer(res, found) {
        if (found === undefined) return writeJsonRpcError(res, id, notFound());
        // A cancel and an update are acknowledged (the extension's empty result); cancelling is
        // cooperative, and this proxy never asks for input, so an update has nothing to take.
        if (method !== 'tasks/get') return writeResult(res, id, { resultType: 'complete' });
        writeResult(res, id, { resultType: 'complete', ...detailedTask(taskId, found, tasks) });
      },
      fail: (res, error) => writeJsonRpcError(res, id, jsonRpcError(error)),
    },
  };
}

function refusal(idText: string, error: JsonRpcErrorObject): Verdict<never> {
  return {
    kind: 'refuse',
    outcome: { label: 'bad_request' },
    answer: (res) => writeJsonRpcError(res, idText, error),
  };
}

/** The extension's not-found error: the same for an id never given, another tenant's, an expired one. */
function notFound(): JsonRpcErrorObject {
  return {
    code: INVALID_PARAMS,
    message:
      'Failed to retrieve task: Task not found. It was never created for you, or its result expired; call the tool again with the same key to get its stored result, if it has one.',
    data: { type: 'task_not_found' },
  };
}

type TaskStatus = 'working' | 'completed' | 'failed' | 'cancelled';

/** The Task fields every answer about a task carries. */
function taskFields(
  taskId: string,
  status: TaskStatus,
  handle: Handle,
  updatedAt: number,
  tasks: TasksPolicy,
): Record<string, unknown> {
  return {
    taskId,
    status,
    createdAt: new Date(handle.createdAt).toISOString(),
    lastUpdatedAt: new Date(Math.max(updatedAt, handle.createdAt)).toISOString(),
    // It lives as long as its record: from its creation to the record's expiry.
    ttlMs: Math.max(0, Math.round(handle.expiresAt - handle.createdAt)),
    pollIntervalMs: tasks.pollIntervalMs,
  };
}

/**
 * A task as tasks/get reports it: working while its call runs; done, its stored answer read as the
 * extension says (a result, `isError: true` included: completed; a JSON-RPC error: failed, or
 * cancelled when its client cancelled it and the tool did not answer).
 */
function detailedTask(
  taskId: string,
  found: HandleState,
  tasks: TasksPolicy,
): Record<string, unknown> {
  const { handle } = found;
  if (found.kind !== 'done') return taskFields(taskId, 'working', handle, handle.createdAt, tasks);
  const { response, completedAt } = found;
  const message = storedMessageOf(response);
  if (message.result !== undefined)
    return {
      ...taskFields(taskId, 'completed', handle, completedAt, tasks),
      result: message.result,
    };
  if (handle.cancelRequested)
    return {
      ...taskFields(taskId, 'cancelled', handle, completedAt, tasks),
      statusMessage: 'Cancelled by its client before the tool answered.',
    };
  const error = message.error;
  return {
    ...taskFields(taskId, 'failed', handle, completedAt, tasks),
    statusMessage: typeof error.message === 'string' ? error.message : 'The tool call failed.',
    error,
  };
}

/** The result or error of a stored tool message (or what a retry is told when it has neither). */
function storedMessageOf(response: StoredResponse): {
  result?: unknown;
  error: Record<string, unknown>;
} {
  const lost = {
    code: -32603,
    message:
      'The call ended without a result this proxy could keep; call the tool again with the same key to see what it answers.',
  };
  if (response.bodyOmitted) return { error: lost };
  try {
    const message = JSON.parse(response.body.toString('utf8')) as {
      result?: unknown;
      error?: Record<string, unknown>;
    };
    if (message.result !== undefined) return { result: message.result, error: lost };
    return { error: message.error ?? lost };
  } catch {
    return { error: lost };
  }
}

function writeResult(res: ServerResponse, idText: string, result: Record<string, unknown>): void {
  const body = `{"jsonrpc":"2.0","id":${idText},"result":${JSON.stringify(result)}}`;
  writeWhole(res, 200, JSON_HEADERS, Buffer.from(body));
}

/**
 * The answer to `initialize` or `server/discover` with the extension added to the server's
 * capabilities (as JSON, or in an event stream's events): the proxy serves tasks for this route.
 */
function capabilitiesWithTasks(): AnswerReshaper {
  let events: SseReader | undefined;
  let json: Buffer[] | undefined;
  let kept = 0;
  return {
    headers(_status, headers) {
      const type = headers.find(([name]) => name === 'content-type')?.[1];
      if (isEventStream(type)) events = new SseReader();
      else if (type?.split(';')[0]?.trim().toLowerCase().endsWith('json')) json = [];
      return headers.filter(([name]) => name !== 'content-length');
    },
    data(chunk) {
      if (json !== undefined) {
        json.push(chunk);
        kept += chunk.length;
        if (kept <= MAX_HANDSHAKE_BYTES) return undefined;
        // Too large to be a handshake's answer: passed on as it came.
        const all = Buffer.concat(json);
        json = undefined;
        return all;
      }
      if (events === undefined) return chunk;
      const out = events
        .push(chunk)
        .map((event) =>
          event.data === undefined ? event.bytes : withTasksEvent(event.bytes, event.data),
        );
      return out.length === 0 ? undefined : Buffer.concat(out);
    },
    end() {
      if (json !== undefined) return withTasksJson(Buffer.concat(json));
      return events?.rest();
    },
  };
}

/** A JSON-RPC message's text with the extension in result.capabilities.extensions, if it has them. */
function withTasks(text: string): string | undefined {
  let message: { result?: { capabilities?: { extensions?: Record<string, unknown> } } };
  try {
    parseJson(text); // refuses duplicate keys, which a re-serialisation would silently merge
    message = JSON.parse(text) as typeof message;
  } catch {
    return undefined;
  }
  const capabilities = message.result?.capabilities;
  if (typeof capabilities !== 'object' || capabilities === null) return undefined;
  capabilities.extensions = { ...capabilities.extensions, [TASKS_EXTENSION]: {} };
  return JSON.stringify(message);
}

function withTasksJson(body: Buffer): Buffer {
  const text = withTasks(body.toString('utf8'));
  return text === undefined ? body : Buffer.from(text);
}

function withTasksEvent(bytes: Buffer, data: string): Buffer {
  const text = withTasks(data);
  if (text === undefined) return bytes;
  // The event's other fields (event, id) are kept; its data becomes the one line of the new text.
  const fields = bytes
    .toString('utf8')
    .split(/\r\n|\r|\n/)
    .filter((line) => line !== '' && !/^data(:|$)/.test(line));
  return Buffer.from([...fields, `data: ${text}`, '', ''].join('\n'));
}
