// The one writer of the proxy's own answers on a protected route (answer.ts) — replays, refusals and
// failures, as problem+json on REST routes and as JSON-RPC on MCP routes (the request's `mcp` field)
// — and of those answers' log outcome. Forwarded requests get theirs where they are forwarded
// (forward.ts, shadow.ts, mcp/forward-tool-call.ts).
import { sendProblem } from '../http/problem';
import { writeWhole } from '../http/response';
import { DERIVED_KEY_HEADER } from '../idempotency/derived-key';
import type { HeaderPairs, StoredResponse } from '../store/record';
import { JSON_HEADERS, jsonRpcError, withId, writeJsonRpcError } from '../mcp/jsonrpc';
import type { Answer } from './answer';
import { BODY_OMITTED_HEADER, OUTCOME_HEADER, type ProtectedRequest } from './context';

export function respond(request: ProtectedRequest, answer: Answer): void {
  noteOutcome(request, answer);
  const { res } = request;
  switch (answer.kind) {
    case 'replay':
      return writeReplay(request, answer.stored);
    case 'problem':
      if (request.mcp) writeJsonRpcError(res, request.mcp.idText, jsonRpcError(answer.error));
      else sendProblem(res, answer.error);
      return;
    case 'unknown-outcome':
      // The first caller's copy of the answer it made itself; later callers get it as a replay.
      if (request.mcp) return writeStoredMessage(request, answer.stored, []);
      return writeWhole(res, answer.stored.status, answer.stored.headers, answer.stored.body);
    case 'client-gone':
      return;
  }
}

/**
 * The log's record of an answer: also for one that cannot be written because the client already
 * has the head and part of the upstream's answer (a stream that broke off).
 */
export function noteOutcome(request: ProtectedRequest, answer: Answer): void {
  const { log } = request;
  switch (answer.kind) {
    case 'replay':
      log.outcome = 'replayed';
      return;
    case 'problem':
      log.outcome = answer.outcome;
      return;
    case 'unknown-outcome':
      log.outcome = 'upstream_error';
      log.outcomeUnknown = true;
      return;
    case 'client-gone':
      log.outcome = 'client_gone';
      return;
  }
}

function writeReplay(request: ProtectedRequest, stored: StoredResponse): void {
  const { policy, log } = request;
  const extra: [string, string][] = [[policy.replayedHeader, 'true']];
  if (log.keyDerived) extra.push([DERIVED_KEY_HEADER, 'true']);
  if (stored.bodyOmitted) extra.push([BODY_OMITTED_HEADER, 'true']);
  // A tool call's retry has a JSON-RPC id of its own: the stored message is answered under it.
  if (request.mcp) return writeStoredMessage(request, stored, extra);
  writeWhole(
    request.res,
    stored.status,
    replayHeaders(stored, policy.dropReplayHeaders),
    stored.body,
    extra,
  );
}

/**
 * The stored headers a later caller gets: never the stored Date (Node sends the current one: a
 * replay is a new message), never one the route drops (dropReplayHeaders: another caller's
 * challenge or nonce). Usually neither is there, and the stored array is used as is.
 */
function replayHeaders(stored: StoredResponse, dropped: ReadonlySet<string>): HeaderPairs {
  const headers = stored.headers;
  for (const [name] of headers) {
    if (name === 'date' || dropped.has(name))
      return headers.filter(([other]) => other !== 'date' && !dropped.has(other));
  }
  return headers;
}

function writeStoredMessage(
  request: ProtectedRequest,
  stored: StoredResponse,
  extra: HeaderPairs,
): void {
  const headers = stored.outcomeUnknown
    ? [...JSON_HEADERS, [OUTCOME_HEADER, 'unknown'] as const]
    : JSON_HEADERS;
  writeWhole(request.res, 200, headers, withId(stored.body, request.mcp!.idText), extra);
}
