// A POST on an MCP route (src/mcp/README.md): read the body once (read-body.ts: what cannot be read is
// refused, never passed on), pass through every message that is not a protected tools/call, and run
// a protected call through the same claim → forward → store path as a REST request, keyed by
// header, params.idempotencyKey or the tool and its arguments. The answers the proxy gives itself
// are JSON-RPC (the request's `mcp` field tells respond.ts so).
import { ProxyError } from '../errors';
import { derivedKeyPolicy } from '../idempotency/derived-key';
import { keyHeaderLines } from '../idempotency/key';
import { problem } from '../protected/answer';
import { respond } from '../protected/respond';
import type { ProtectedDeps, ProtectedRequest } from '../protected/context';
import { answerCall, recordIdOf } from '../protected/decide';
import { forwardUnstored } from '../protected/shadow';
import { callPlaceOf } from './in-flight-calls';
import { INVALID_REQUEST, writeJsonRpcError, writeTransportError } from './jsonrpc';
import { type BodyRefusal, readMcpBody } from './read-body';
import {
  derivedToolCallKey,
  readMcpMessage,
  sentToolCallKey,
  toolCallFingerprint,
} from './tool-call';

export async function handleMcpRequest(
  deps: ProtectedDeps,
  request: ProtectedRequest,
): Promise<void> {
  const { req, res, route, policy, log } = request;
  const mcp = policy.mcp!;
  const read = await readMcpBody(req, policy.maxRequestBytes);
  if (read.kind === 'gone') {
    log.outcome = 'error'; // the client went away mid-body: nothing to answer
    res.destroy();
    return;
  }
  if (read.kind === 'refused') {
    // The unread rest of a body over the limit would be parsed as the next request.
    if (read.unread) res.shouldKeepAlive = false;
    return refuseBody(request, read.refusal);
  }
  // The upstream gets the bytes that were read, inflated: the header described the bytes as sent.
  if (read.decoded) delete req.headers['content-encoding'];
  const body = read.body;

  const message = readMcpMessage(read.parsed, mcp);
  switch (message.kind) {
    case 'pass':
      return forwardUnstored(deps.upstreams, request, sentKeyHeader(request), body, undefined);
    case 'cancel':
      if (!deps.toolCalls?.has(callPlaceOf(policy, req.headers), message.requestIdText))
        return forwardUnstored(deps.upstreams, request, sentKeyHeader(request), body, undefined);
      log.outcome = 'cancel_held';
      res.writeHead(202, { 'content-length': '0' });
      res.end();
      return;
    case 'batch-with-call':
    case 'notification-call':
      log.tool = message.tool;
      log.outcome = 'bad_request';
      return writeJsonRpcError(res, 'null', {
        code: INVALID_REQUEST,
        message:
          message.kind === 'batch-with-call'
            ? `The batch contains a tools/call for "${message.tool}", which runs at most once through this proxy; batches cannot be, so send each tools/call as a message of its own.`
            : `The tools/call for "${message.tool}" has no id, so nothing would come back to store or replay; send it as a request with an id.`,
        data: { type: 'idempotency_call_not_supported' },
      });
  }

  const { call, parsed } = message;
  log.tool = call.tool;
  const toolRequest: ProtectedRequest = { ...request, mcp: call };
  const sent = sentToolCallKey(
    keyHeaderLines(req, policy.key.header),
    parsed,
    policy.key.maxLength,
    policy.key.header,
  );
  if (sent !== undefined && !sent.ok)
    return respond(
      toolRequest,
      problem(
        'invalid_key',
        new ProxyError('IDEMPOTENCY_KEY_INVALID', sent.detail, { route: route.name }),
      ),
    );
  const fingerprint = toolCallFingerprint(call, parsed, mcp);
  if (sent !== undefined) {
    log.key = sent.key;
    const id = recordIdOf(toolRequest, sent.key);
    return answerCall(deps, toolRequest, { id, fingerprint, body });
  }
  const key = derivedToolCallKey(call, parsed, mcp);
  log.key = key;
  log.keyDerived = true;
  const derived = { ...toolRequest, policy: derivedKeyPolicy(policy) };
  return answerCall(deps, derived, { id: recordIdOf(derived, key), fingerprint, body });
}

/** A body the proxy could not read: answered, never forwarded, whatever it might have been. */
function refuseBody(request: ProtectedRequest, refusal: BodyRefusal): void {
  request.log.outcome = refusal.status === 413 ? 'too_large' : 'bad_request';
  const data: Record<string, unknown> = { type: refusal.type };
  if (refusal.errorCode !== undefined) data.code = refusal.errorCode;
  writeTransportError(request.res, refusal.status, {
    code: refusal.code,
    message: refusal.message,
    data,
  });
}

/**
 * A message the route does not protect goes up with the key header it was sent with (an unlisted
 * tool's server may dedupe on it itself), under forwardKeyAs like a claimed call's key.
 */
function sentKeyHeader(request: ProtectedRequest): string | undefined {
  const value = request.req.headers[request.policy.key.header];
  return typeof value === 'string' ? value : undefined;
}
