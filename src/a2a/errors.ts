// What A2A clients get from the proxy itself (src/a2a/README.md#errors), in each binding's own error
// shape, never problem+json:
//
//   JSON-RPC   HTTP 200, {"jsonrpc":"2.0","id":<the request's>,"error":{code,message,data:[ErrorInfo]}}
//   HTTP+JSON  the HTTP status, {"error":{code,status,message,details:[ErrorInfo]}} (google.rpc.Status)
//
// A2A v1.0 puts error details in an array of typed objects; the proxy's is one
// google.rpc.ErrorInfo with `reason` (what happened, for programs), `domain` "idempotency-proxy"
// (so no client mistakes it for one of A2A's own reasons) and `metadata` (the proxy's error code,
// and `retryAfter` in seconds where there is one). A key reused for another message is JSON-RPC's
// -32602 (invalid params: the SDK client reads it as a RequestMalformedError); every other refusal
// has the HTTP status it would have on a REST route as its code, as on MCP routes.
import type { ServerResponse } from 'node:http';
import type { ErrorCode, ProxyError } from '../errors';
import { writeWhole, tooLateToAnswer } from '../http/response';
import { JSON_HEADERS, STORED_PREFIX, storedMessage } from '../jsonrpc/jsonrpc';
import type { HeaderPairs, StoredResponse } from '../store/record';

export const ERROR_INFO_TYPE = 'type.googleapis.com/google.rpc.ErrorInfo';
export const ERROR_DOMAIN = 'idempotency-proxy';
/** JSON-RPC's "Invalid params" (JSON-RPC 2.0 §5.1): the code of a messageId reused for another message. */
export const INVALID_PARAMS = -32602;

/** `reason` of the refusals src/a2a/README.md names; every other code is its own name. */
const REASONS: Partial<Record<ErrorCode, string>> = {
  IDEMPOTENCY_KEY_IN_FLIGHT: 'IDEMPOTENCY_KEY_IN_PROGRESS',
  IDEMPOTENCY_KEY_REUSED: 'IDEMPOTENCY_KEY_CONFLICT',
  STORE_UNAVAILABLE: 'IDEMPOTENCY_STORE_UNAVAILABLE',
  STORE_BUSY: 'IDEMPOTENCY_STORE_UNAVAILABLE',
};

/** google.rpc.Code names for the HTTP statuses the proxy answers with (HTTP+JSON's `status`). */
const STATUS_NAMES: Readonly<Record<number, string>> = {
  400: 'INVALID_ARGUMENT',
  409: 'ABORTED',
  413: 'INVALID_ARGUMENT',
  415: 'INVALID_ARGUMENT',
  422: 'INVALID_ARGUMENT',
  502: 'UNKNOWN',
  503: 'UNAVAILABLE',
  504: 'DEADLINE_EXCEEDED',
};

/** One of the proxy's answers, before a binding gives it its shape. */
export interface A2aProblem {
  /** The HTTP status (the HTTP+JSON answer's; a JSON-RPC answer's when the body was unreadable). */
  readonly status: number;
  /** The JSON-RPC error code. */
  readonly rpcCode: number;
  readonly reason: string;
  readonly message: string;
  readonly metadata: Readonly<Record<string, string>>;
  readonly retryAfterSeconds?: number;
}

/** A ProxyError as A2A says it; `outcomeUnknown` marks a failure after the message was sent. */
export function a2aProblem(error: ProxyError, outcomeUnknown = false): A2aProblem {
  const reason = outcomeUnknown
    ? 'IDEMPOTENCY_OUTCOME_UNKNOWN'
    : (REASONS[error.code] ?? error.code);
  const metadata: Record<string, string> = { code: error.code };
  const retryAfterSeconds =
    error.retryAfterSeconds === undefined
      ? undefined
      : Math.max(1, Math.ceil(error.retryAfterSeconds));
  if (retryAfterSeconds !== undefined) metadata.retryAfter = String(retryAfterSeconds);
  return {
    status: error.status,
    rpcCode: error.code === 'IDEMPOTENCY_KEY_REUSED' ? INVALID_PARAMS : error.status,
    reason,
    message: error.message,
    metadata,
    retryAfterSeconds,
  };
}

function errorInfo(problem: A2aProblem): Record<string, unknown> {
  return {
    '@type': ERROR_INFO_TYPE,
    reason: problem.reason,
    domain: ERROR_DOMAIN,
    metadata: problem.metadata,
  };
}

/** The JSON-RPC error object. */
export function rpcErrorObject(problem: A2aProblem): Record<string, unknown> {
  return { code: problem.rpcCode, message: problem.message, data: [errorInfo(problem)] };
}

/** A whole JSON-RPC error response under `idText` ('null' when no id was read). */
export function rpcErrorMessage(idText: string, problem: A2aProblem): string {
  return `${STORED_PREFIX}"id":${idText},"error":${JSON.stringify(rpcErrorObject(problem))}}`;
}

/** The HTTP+JSON binding's error body (google.rpc.Status as A2A v1.0 §11.6 shapes it). */
export function restErrorBody(problem: A2aProblem): string {
  return JSON.stringify({
    error: {
      code: problem.status,
      status: STATUS_NAMES[problem.status] ?? 'INTERNAL',
      message: problem.message,
      details: [errorInfo(problem)],
    },
  });
}

/**
 * Answers a JSON-RPC request with an error: HTTP 200 once its id is known (the binding's errors are
 * in the body), the refusal's own status when the body could not be read at all.
 */
export function writeRpcError(
  res: ServerResponse,
  idText: string | undefined,
  problem: A2aProblem,
  extra: HeaderPairs = [],
): void {
  if (tooLateToAnswer(res)) return;
  const status = idText === undefined ? problem.status : 200;
  const body = Buffer.from(rpcErrorMessage(idText ?? 'null', problem));
  writeWhole(res, status, JSON_HEADERS, body, extra);
}

export const REST_HEADERS: HeaderPairs = [['content-type', 'application/a2a+json']];

/** Answers an HTTP+JSON request with an error: the HTTP status, Retry-After where there is one. */
export function writeRestError(
  res: ServerResponse,
  problem: A2aProblem,
  extra: HeaderPairs = [],
): void {
  if (tooLateToAnswer(res)) return;
  const retry: HeaderPairs =
    problem.retryAfterSeconds === undefined
      ? []
      : [['retry-after', String(problem.retryAfterSeconds)]];
  writeWhole(res, problem.status, REST_HEADERS, Buffer.from(restErrorBody(problem)), [
    ...retry,
    ...extra,
  ]);
}

/** The stored answer for a send that may have run (unknownOutcome: fail keeps it), per binding. */
export function storedUnknown(
  rpc: boolean,
  error: ProxyError,
  outcomeHeader: string,
): StoredResponse {
  const problem = a2aProblem(error, true);
  const errorJson = JSON.stringify(rpcErrorObject(problem));
  return {
    status: rpc ? 200 : problem.status,
    headers: [...(rpc ? JSON_HEADERS : REST_HEADERS), [outcomeHeader, 'unknown']],
    body: rpc ? storedMessage('error', errorJson) : Buffer.from(restErrorBody(problem)),
    bodyOmitted: false,
    outcomeUnknown: true,
  };
}
