// Renders the proxy's own errors as application/problem+json (RFC 9457), or, on a route that speaks
// a commerce protocol's contract (idempotency.profile), in that protocol's own error shape.
import type { ServerResponse } from 'node:http';
import { type ErrorShape, ProxyError } from '../errors';
import { tooLateToAnswer } from './response';

export const PROBLEM_CONTENT_TYPE = 'application/problem+json';

export interface ProblemBody {
  type: string;
  title: string;
  status: number;
  detail: string;
  code: string;
  route?: string;
  key?: string;
}

export function problemType(code: string): string {
  return `urn:idempotency-proxy:problem:${code.toLowerCase().replace(/_/g, '-')}`;
}

export function problemBody(error: ProxyError): ProblemBody {
  const body: ProblemBody = {
    type: problemType(error.code),
    title: error.title,
    status: error.status,
    detail: error.message,
    code: error.code,
  };
  if (error.route !== undefined) body.route = error.route;
  if (error.key !== undefined) body.key = error.key;
  return body;
}

/** The header pairs of a problem answer (also what gets stored for an unknown outcome). */
export function problemHeaders(error: ProxyError, bodyLength: number): [string, string][] {
  const headers: [string, string][] = [
    ['content-type', PROBLEM_CONTENT_TYPE],
    ['content-length', String(bodyLength)],
  ];
  if (error.retryAfterSeconds !== undefined) {
    headers.push(['retry-after', String(Math.max(1, Math.ceil(error.retryAfterSeconds)))]);
  }
  return headers;
}

export const problemJson: ErrorShape = (error) => {
  const body = Buffer.from(JSON.stringify(problemBody(error)));
  return { status: error.status, headers: problemHeaders(error, body.length), body };
};

export function sendProblem(
  res: ServerResponse,
  error: ProxyError,
  extraHeaders: readonly (readonly [string, string])[] = [],
  shape: ErrorShape = problemJson,
): void {
  if (tooLateToAnswer(res)) return;
  const answer = shape(error);
  const headers = [...answer.headers, ...extraHeaders];
  res.writeHead(answer.status, headers.flat());
  res.end(answer.body);
}
