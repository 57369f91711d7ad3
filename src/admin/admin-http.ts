// What every admin endpoint answers with: JSON, problem+json errors, and the bearer-token check.
// The token is compared in constant time and never echoed or logged.
import { createHash, timingSafeEqual } from 'node:crypto';
import type http from 'node:http';
import { ProxyError } from '../errors';
import { problemBody } from '../http/problem';
import { JWT_PREFIX, tenantHash } from '../idempotency/tenant';

export function json(res: http.ServerResponse, status: number, value: unknown): void {
  const body = JSON.stringify(value, null, 2);
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
    'cache-control': 'no-store',
  });
  res.end(body);
}

export function problem(
  res: http.ServerResponse,
  status: number,
  title: string,
  detail: string,
): void {
  const error = new ProxyError('BAD_REQUEST', detail);
  const body = JSON.stringify({
    ...problemBody(error),
    type: 'about:blank',
    title,
    status,
    code: `ADMIN_${status}`,
  });
  res.writeHead(status, {
    'content-type': 'application/problem+json',
    'content-length': Buffer.byteLength(body),
    'cache-control': 'no-store',
  });
  res.end(body);
}

/**
 * The gate of every token-protected endpoint: true when the request may go on; otherwise it has
 * answered (404 when no token is configured, so the endpoints are off rather than open; 401 for a
 * missing or wrong token).
 */
export function authorized(
  req: http.IncomingMessage,
  res: http.ServerResponse,
  token: string | undefined,
  off: { readonly title: string; readonly endpoints: string },
): boolean {
  if (token === undefined) {
    problem(res, 404, off.title, `Set admin.token (e.g. ADMIN_TOKEN) to enable ${off.endpoints}.`);
    return false;
  }
  if (!bearerMatches(req.headers.authorization, token)) {
    res.setHeader('www-authenticate', 'Bearer realm="idempotency-proxy admin"');
    problem(res, 401, 'Unauthorized', 'Send Authorization: Bearer <admin.token>.');
    return false;
  }
  return true;
}

/** Constant-time comparison of the presented bearer token with the configured one. */
export function bearerMatches(header: string | undefined, token: string): boolean {
  const match = /^Bearer\s+(.+)$/i.exec(header ?? '');
  const presented = createHash('sha256')
    .update(match?.[1]?.trim() ?? '')
    .digest();
  const expected = createHash('sha256').update(token).digest();
  return timingSafeEqual(presented, expected) && match !== null;
}

export function decodeSegment(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}

/** The tenant hash for raw values given in the order of the route's tenant parts. */
export function tenantOf(parts: readonly string[], values: readonly string[]): string {
  if (parts.length === 0) return '';
  const headers: http.IncomingHttpHeaders = {};
  const claims: Record<string, string> = {};
  parts.forEach((part, i) => {
    const value = values[i];
    if (value === undefined) return;
    if (part.startsWith(JWT_PREFIX)) claims[part.slice(JWT_PREFIX.length)] = value;
    else headers[part.slice('header:'.length)] = value;
  });
  return tenantHash(headers, parts, claims);
}
