// What MCP clients get from the proxy itself (src/mcp/README.md): JSON-RPC responses, never problem+json. A
// JSON-RPC client reads only the body of an HTTP 200, so every refusal of a tool call the proxy
// makes on an MCP route is a JSON-RPC error under the request's `id`, with the HTTP status it would
// have had on a REST route as its `code` and a `data.type` a program can branch on. A body that
// cannot be read at all (../jsonrpc/read-body.ts) has no id: it is answered as the SDK's server
// answers one, with the HTTP status and a JSON-RPC code of JSON-RPC's or the SDK's own
// (writeTransportError).
import type { ServerResponse } from 'node:http';
import type { ErrorCode, ProxyError } from '../errors';
import { writeWhole, tooLateToAnswer } from '../http/response';
import {
  errorMessage,
  JSON_HEADERS,
  type JsonRpcErrorObject,
  STORED_PREFIX_BYTES,
  storedMessage,
} from '../jsonrpc/jsonrpc';
import type { HeaderPairs, StoredResponse } from '../store/record';

/** `data.type` of the refusals src/mcp/README.md names; every other code is its lower-cased name. */
const ERROR_TYPES: Partial<Record<ErrorCode, string>> = {
  IDEMPOTENCY_KEY_IN_FLIGHT: 'idempotency_key_in_progress',
  IDEMPOTENCY_KEY_REUSED: 'idempotency_key_conflict',
  IDEMPOTENCY_OUTCOME_UNKNOWN: 'idempotency_outcome_unknown',
  STORE_UNAVAILABLE: 'idempotency_store_unavailable',
  STORE_BUSY: 'idempotency_store_unavailable',
  IDEMPOTENCY_KEY_INVALID: 'idempotency_key_invalid',
};

/**
 * The JSON-RPC error for one of the proxy's own answers. `outcomeUnknown` marks an upstream failure
 * after the request was sent (a 502 or 504 whose own code names the transport problem): to a client
 * it is the one case "the tool may have run".
 */
export function jsonRpcError(error: ProxyError, outcomeUnknown = false): JsonRpcErrorObject {
  const type = outcomeUnknown
    ? 'idempotency_outcome_unknown'
    : (ERROR_TYPES[error.code] ?? error.code.toLowerCase());
  const data: Record<string, unknown> = { type, code: error.code };
  if (error.retryAfterSeconds !== undefined)
    data.retryAfter = Math.max(1, Math.ceil(error.retryAfterSeconds));
  return { code: error.status, message: error.message, data };
}

/** Answers a JSON-RPC request with an error: HTTP 200, as MCP's Streamable HTTP transport expects. */
export function writeJsonRpcError(
  res: ServerResponse,
  idText: string,
  error: JsonRpcErrorObject,
  extra: HeaderPairs = [],
): void {
  if (tooLateToAnswer(res)) return;
  writeWhole(res, 200, JSON_HEADERS, Buffer.from(errorMessage(idText, error)), extra);
}

/**
 * Refuses a POST whose message could not be read, as the MCP SDK's Streamable HTTP server does:
 * the HTTP status says what failed, the body is a JSON-RPC error under id null (no id was read).
 */
export function writeTransportError(
  res: ServerResponse,
  status: number,
  error: JsonRpcErrorObject,
): void {
  if (tooLateToAnswer(res)) return;
  const body = JSON.stringify({ jsonrpc: '2.0', error, id: null });
  writeWhole(res, status, JSON_HEADERS, Buffer.from(body));
}

/** The stored answer for an MCP call that may have run (unknownOutcome: fail keeps it). */
export function storedUnknownOutcome(error: ProxyError, outcomeHeader: string): StoredResponse {
  return {
    status: 200,
    headers: [...JSON_HEADERS, [outcomeHeader, 'unknown']],
    body: storedMessage('error', JSON.stringify(jsonRpcError(error, true))),
    bodyOmitted: false,
    outcomeUnknown: true,
  };
}

/**
 * A stored unknown outcome's error with `data.retryAfter` (seconds), as a 409 in flight carries it:
 * on a route that reconciles, when the next probe may tell (docs/reconcile.md). A body that is not
 * one of our stored errors is returned as it is.
 */
export function withRetryAfterData(stored: Buffer, retryAfterSeconds: number): Buffer {
  if (!stored.subarray(0, STORED_PREFIX_BYTES.length).equals(STORED_PREFIX_BYTES)) return stored;
  let message: { error?: { data?: unknown } };
  try {
    message = JSON.parse(stored.toString('utf8')) as typeof message;
  } catch {
    return stored;
  }
  const error = message.error;
  if (typeof error?.data !== 'object' || error.data === null) return stored;
  return storedMessage(
    'error',
    JSON.stringify({ ...error, data: { ...error.data, retryAfter: retryAfterSeconds } }),
  );
}
