// A POST on an MCP route (src/mcp/README.md): read the JSON-RPC message, pass through everything
// that is not a protected tools/call, and run a protected call through the same claim → forward →
// store path as a REST request, keyed by header, params.idempotencyKey or the tool and its
// arguments. The answers the proxy gives itself are JSON-RPC (the request's `mcp` field tells
// respond.ts so).
import { ProxyError } from '../errors';
import { BodyTooLargeError, readBody } from '../http/body';
import { derivedKeyPolicy } from '../idempotency/derived-key';
import { keyHeaderLines } from '../idempotency/key';
import { problem } from '../protected/answer';
import { respond } from '../protected/respond';
import type { ProtectedDeps, ProtectedRequest } from '../protected/context';
import { answerCall, recordIdOf } from '../protected/decide';
import { forwardUnstored } from '../protected/shadow';
import { sessionOf } from './in-flight-calls';
import { INVALID_REQUEST, writeJsonRpcError } from './jsonrpc';
import {
  derivedToolCallKey,
  readMcpMessage,
  sentToolCallKey,
  toolCallFingerprint,
  UNKNOWN_CALL,
} from './tool-call';

export async function handleMcpRequest(
  deps: ProtectedDeps,
  request: ProtectedRequest,
): Promise<void> {
  const { req, res, route, policy, log } = request;
  const mcp = policy.mcp!;
  let body: Buffer;
  try {
    body = await readBody(req, policy.maxRequestBytes);
  } catch (error) {
    if (!(error instanceof BodyTooLargeError)) {
      log.outcome = 'error'; // the client went away mid-body: nothing to answer
      res.destroy();
      return;
    }
    // Too large to tell what it is, so it cannot pass as "not a tool call"; the unread rest would
    // be parsed as the next request, so the connection closes.
    res.shouldKeepAlive = false;
    return respond(
      { ...request, mcp: UNKNOWN_CALL },
      problem(
        'too_large',
        new ProxyError(
          'REQUEST_TOO_LARGE',
          `The message is larger than this route's limit of ${policy.maxRequestBytes} bytes (maxRequestBytes); send a smaller one.`,
          { route: route.name },
        ),
      ),
    );
  }

  const message = readMcpMessage(body, mcp);
  switch (message.kind) {
    case 'pass':
      return forwardUnstored(deps.upstreams, request, sentKeyHeader(request), body, undefined);
    case 'cancel':
      if (!deps.toolCalls?.has(sessionOf(req.headers), message.requestIdText))
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
    case 'duplicate-json-key':
      return respond(
        { ...request, mcp: UNKNOWN_CALL },
        problem(
          'bad_request',
          new ProxyError(
            'JSON_DUPLICATE_KEY',
            'The message has an object with the same key twice, which parsers read differently, so the proxy cannot know which tool or arguments the server would run. Send each key once.',
            { route: route.name },
          ),
        ),
      );
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

/**
 * A message the route does not protect goes up with the key header it was sent with (an unlisted
 * tool's server may dedupe on it itself), under forwardKeyAs like a claimed call's key.
 */
function sentKeyHeader(request: ProtectedRequest): string | undefined {
  const value = request.req.headers[request.policy.key.header];
  return typeof value === 'string' ? value : undefined;
}
