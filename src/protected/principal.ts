// The principal step of a protected request on a route scoped by a token's claim
// (tenant: [jwt:sub]): before its body is read, the bearer token is verified
// (auth/jwt-principals.ts), and its claims become part of the record's scope. A token that does not
// verify is answered 401 problem+json (RFC 6750's WWW-Authenticate with it, on MCP routes too: an
// MCP client treats an HTTP 401 as "authorise again"), and nothing is forwarded. Shadow mode
// forwards it as a pass-through route would, and notes what enforcement would have done.
import { ProxyError } from '../errors';
import { sendProblem } from '../http/problem';
import type { Claims } from '../idempotency/tenant';
import type { Outcome, ProtectedDeps, ProtectedRequest } from './protocol';
import { passThroughInShadow } from './shadow';

/**
 * Sets the request's verified claims (request.principal) on a route scoped by a claim; returns how
 * the request was answered when its token does not verify, else undefined.
 */
export async function readPrincipal(
  deps: ProtectedDeps,
  request: ProtectedRequest,
): Promise<Outcome | undefined> {
  const { policy, req, res, route } = request;
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
  if (!policy.enforce) return passThroughInShadow(deps, request, 'would_reject_unauthorized');
  if (verified.reason === 'keys-unavailable') {
    sendProblem(
      res,
      new ProxyError('AUTH_KEYS_UNAVAILABLE', verified.detail, {
        route: route.name,
        retryAfterSeconds: 1,
      }),
      [],
      policy.errorShape,
    );
  } else {
    const error = new ProxyError('AUTH_TOKEN_INVALID', verified.detail, { route: route.name });
    const challenge = [['www-authenticate', wwwAuthenticate(verified.detail)]] as const;
    sendProblem(res, error, challenge, policy.errorShape);
  }
  return { label: 'unauthorized' };
}

/** RFC 6750 §3: the challenge, with the reason as error_description (quotes and backslashes dropped). */
function wwwAuthenticate(detail: string): string {
  return `Bearer error="invalid_token", error_description="${detail.replace(/["\\]/g, '')}"`;
}
