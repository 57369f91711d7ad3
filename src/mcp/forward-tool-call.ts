// Forwarding a protected tools/call under its claim, then settling the claim from the MCP server's
// answer (tool-call-answer.ts): the result is stored the moment it arrives, before the client sees
// it; a non-final answer releases the claim; a stream that ends or breaks without the result is an
// unknown outcome, decided by the route's `unknownOutcome` as on REST routes
// (README.md#what-a-client-sees-on-a-protected-route, src/mcp/README.md).
import { performance } from 'node:perf_hooks';
import { ProxyError } from '../errors';
import { sendUpstream, transportFailure } from '../protected/outgoing';
import type { Leader } from '../protected/local-keys';
import type { ProtectedDeps, ProtectedRequest } from '../protected/context';
import type { RecordId, StoredResponse } from '../store/record';
import { completeRecord, releaseRecord, settleFailure } from '../protected/settle';
import { sessionOf } from './in-flight-calls';
import { JSON_HEADERS, jsonRpcError } from './jsonrpc';
import { ToolCallAnswer, type ToolCallVerdict } from './tool-call-answer';

export async function forwardToolCall(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  id: RecordId,
  fence: string,
  body: Buffer,
  leader: Leader | undefined,
): Promise<void> {
  const { req, res, route, policy, log } = request;
  const settle = (verdict: ToolCallVerdict): Promise<void> =>
    settleRecord(deps, request, id, fence, verdict, leader);
  const answer = new ToolCallAnswer(res, policy, request.mcp!, settle);
  const started = performance.now();
  // The record's own scope and tenant: a cancel is held only for the caller whose call this is.
  const place = { scope: id.scope, tenant: id.tenant, session: sessionOf(req.headers) };
  deps.toolCalls?.add(place, request.mcp!.idText);
  try {
    await sendUpstream(deps.upstreams, request, id.key, body, answer);
  } catch (error) {
    log.upstreamMs += performance.now() - started;
    const failure = transportFailure(route, error, id.key);
    if (answer.status === 0) return settleFailure(deps, request, id, fence, failure, leader);
    if (answer.settled) {
      // The result is stored and on its way; only what came after it broke off.
      log.outcome = 'executed';
      return answer.end();
    }
    return unknownOutcome(deps, request, id, fence, answer, failure.error, leader);
  } finally {
    deps.toolCalls?.delete(place, request.mcp!.idText);
  }
  log.upstreamMs += performance.now() - started;
  log.outcome = 'executed';
  if (!answer.settled) {
    const verdict = answer.verdictAtEnd();
    if (verdict.kind === 'unknown') {
      const error = new ProxyError('UPSTREAM_CONNECTION_LOST', verdict.detail, {
        route: route.name,
        key: id.key,
      });
      return unknownOutcome(deps, request, id, fence, answer, error, leader);
    }
    await settle(verdict);
  }
  answer.end();
}

async function unknownOutcome(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  id: RecordId,
  fence: string,
  answer: ToolCallAnswer,
  error: ProxyError,
  leader: Leader | undefined,
): Promise<void> {
  const failure = { sent: true, error };
  await settleFailure(deps, request, id, fence, failure, leader, answer.streaming);
  if (answer.streaming) answer.endWithError(jsonRpcError(error, true));
}

/** Stores the tool's result or releases the claim; a store failure is logged, never thrown. */
function settleRecord(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  id: RecordId,
  fence: string,
  verdict: ToolCallVerdict,
  leader: Leader | undefined,
): Promise<void> {
  if (verdict.kind === 'release') return releaseRecord(deps, request, id, fence);
  if (verdict.kind !== 'store') return Promise.resolve();
  const stored: StoredResponse = {
    status: 200,
    headers: JSON_HEADERS,
    body: verdict.message,
    bodyOmitted: false,
    outcomeUnknown: false,
  };
  return completeRecord(deps, request, id, fence, stored, leader);
}
