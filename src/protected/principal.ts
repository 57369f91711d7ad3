// The principal step of a protected request on a route scoped by a token's claim
// (tenant: [jwt:sub]): before its body is read, the bearer token is verified
// (auth/jwt-principals.ts), and its claims become part of the record's scope. A token that does not
// verify is answered 401 problem+json (RFC 6750's WWW-Authenticate with it, on MCP routes too: an
// MCP client treats an HTTP 401 as "authorise again"), and nothing is forwarded. Shadow mode
// forwards it as a pass-through route would, and notes what enforcement would have done.
import { ProxyError } from '../errors';
import { sendProblem } from '../http/problem';
import type { Claims } from '../idempotency/tenant';
import type { ProtectedDeps, ProtectedRequest, Verdict } from './protocol';

/**
 * Sets the request's verified claims (request.principal) on a route scoped by a claim; returns
 * what becomes of the request when its token does not verify (refused, or passed in shadow mode),
 * else undefined.
 */
export async function readPrincipal(
  deps: ProtectedDeps,
  request: ProtectedRequest,
): Promise<Verdict<never> | undefined> {
  const { policy, req, route } = request;
  if (policy.tenantClaims.length === 0) return undefined;
  // compile.ts refuses a jwt:<claim> tenant without auth.jwt, so the verifier is there.
  const verified = await deps.principals!.verify(
    req.headersDistinct.authorization,
    policy.tenantClaims,
  );
  if (verified.ok) {
    request.principal = verified.claims as Claims;
    return undefined;
  }
  if (!policy.enforce)
    return { kind: 'pass', outcome: { label: 'passthrough', shadow: 'would_reject_unauthorized' } };
  const outcome = { label: 'unauthorized' } as const;
  if (verified.reason === 'keys-unavailable') {
    const error = new ProxyError('AUTH_KEYS_UNAVAILABLE', verified.detail, {
      route: route.name,
      retryAfterSeconds: 1,
    });
    return {
      kind: 'refuse',
      outcome,
      answer: (res) => sendProblem(res, error, [], policy.errorShape),
    };
  }
  const error = new ProxyError('AUTH_TOKEN_INVALID', verified.detail, { route: route.name });
  const challenge = [['www-authenticate', wwwAuthenticate(verified.detail)]] as const;
  return {
    kind: 'refuse',
    outcome,
    answer: (res) => sendProblem(res, error, challenge, policy.errorShape),
  };
}

/** RFC 6750 §3: the challenge, with the reason as error_description (quotes and backslashes dropped). */
function wwwAuthenticate(detail: string): string {
  return `Bearer error="invalid_token", error_description="${detail.replace(/["\\]/g, '')}"`;
}
