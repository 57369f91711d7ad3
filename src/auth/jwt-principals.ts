// Who a caller is, for routes that scope keys by a claim (tenant: [jwt:sub]): the bearer token is
// verified with jose against auth.jwt's keys, issuer, audience and algorithms. An agent's OAuth
// access token is refreshed while its principal stays: scoping by a verified claim keeps a retry
// sent with the new token in the scope of the attempt that timed out with the old one.
//
// No request waits on the network once the keys are loaded: they are fetched when the config is
// compiled into a runtime, kept without a maximum age, fetched again in the background every
// `refresh` (a failed fetch keeps the keys it had) and, for a token whose kid they do not hold,
// once per `cooldown` (a key the issuer has just rotated in). Verification itself is CPU only.
import {
  createLocalJWKSet,
  createRemoteJWKSet,
  errors,
  type JWTPayload,
  type JWTVerifyGetKey,
  jwtVerify,
  type RemoteJWKSet,
} from 'jose';
import type { JwtConfig } from '../config/types';

export type Verification =
  | { readonly ok: true; readonly claims: JWTPayload }
  /** `invalid`: the token's fault (401); `keys-unavailable`: the key set could not be fetched (503). */
  | {
      readonly ok: false;
      readonly reason: 'invalid' | 'keys-unavailable';
      readonly detail: string;
    };

/** A failure to get the key set, as opposed to a token it does not verify. */
class KeysUnavailable extends Error {}

// RFC 6750 §2.1: "Bearer" (any case), one or more spaces, then a token68.
const BEARER = /^bearer +([A-Za-z0-9\-._~+/]+=*) *$/i;

export class JwtPrincipals {
  private readonly remote: RemoteJWKSet | undefined;
  private readonly getKey: JWTVerifyGetKey;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly config: JwtConfig,
    /** A background fetch of the key set failed (the keys already held stay in use). */
    private readonly onRefreshError: (error: unknown) => void = () => {},
  ) {
    if (config.jwks.kind === 'file') {
      this.remote = undefined;
      this.getKey = createLocalJWKSet({ keys: config.jwks.keySet.keys as never[] });
      return;
    }
    const remote = createRemoteJWKSet(new URL(config.jwks.url), {
      cooldownDuration: config.cooldownMs,
      cacheMaxAge: Infinity,
      timeoutDuration: 5_000,
    });
    this.remote = remote;
    this.getKey = async (header, token) => {
      try {
        return await remote(header, token);
      } catch (error) {
        // A token whose kid the set lacks is the token's problem; anything else is the fetch's.
        if (error instanceof errors.JWKSNoMatchingKey) throw error;
        if (error instanceof errors.JWKSMultipleMatchingKeys) throw error;
        throw new KeysUnavailable(describe(error), { cause: error });
      }
    };
  }

  /** Fetches the key set now, then every `refresh`: no request waits for a fetch afterwards. */
  start(): void {
    const remote = this.remote;
    if (remote === undefined || this.timer !== undefined) return;
    const fetch = (): void => {
      remote.reload().catch(this.onRefreshError);
    };
    fetch();
    this.timer = setInterval(fetch, this.config.refreshMs);
    this.timer.unref();
  }

  close(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  /**
   * Verifies the request's `Authorization` lines (one `Bearer` token). The claims named in
   * `claims` must be present as strings or numbers: they become the tenant.
   */
  async verify(
    authorization: readonly string[] | undefined,
    claims: readonly string[],
  ): Promise<Verification> {
    const invalid = (detail: string): Verification => ({ ok: false, reason: 'invalid', detail });
    if (authorization === undefined || authorization.length === 0)
      return invalid(
        'This route scopes keys by who the caller is: send Authorization: Bearer <token> with a token from the issuer.',
      );
    if (authorization.length > 1)
      return invalid(
        'Authorization was sent more than once; send one Authorization: Bearer <token> line.',
      );
    const token = BEARER.exec(authorization[0]!)?.[1];
    if (token === undefined)
      return invalid('Authorization must be "Bearer <token>" with a JWT from the issuer.');
    let payload: JWTPayload;
    try {
      ({ payload } = await jwtVerify(token, this.getKey, {
        issuer: [...this.config.issuer],
        audience: [...this.config.audience],
        algorithms: [...this.config.algorithms],
        clockTolerance: this.config.clockSkewMs / 1000,
      }));
    } catch (error) {
      if (error instanceof KeysUnavailable)
        return {
          ok: false,
          reason: 'keys-unavailable',
          detail: `The issuer's signing keys could not be fetched (${error.message}), so the token cannot be verified; retry with the same key shortly.`,
        };
      return invalid(
        `${whyInvalid(error)} Get a new token from the issuer and retry with the same key.`,
      );
    }
    for (const claim of claims) {
      const value = payload[claim];
      if (typeof value !== 'string' && typeof value !== 'number')
        return invalid(
          value === undefined
            ? `The token has no "${claim}" claim, which this route scopes keys by.`
            : `The token's "${claim}" claim, which this route scopes keys by, is not a string or number.`,
        );
    }
    return { ok: true, claims: payload };
  }
}

/** What is wrong with a token, in words a client's developer can act on (never the token itself). */
function whyInvalid(error: unknown): string {
  if (error instanceof errors.JWTExpired) return 'The token has expired.';
  if (error instanceof errors.JWTClaimValidationFailed)
    return `The token's "${error.claim}" claim is not accepted here (${error.reason}).`;
  if (error instanceof errors.JOSEAlgNotAllowed)
    return 'The token is signed with an algorithm this route does not accept.';
  if (error instanceof errors.JWKSNoMatchingKey)
    return "The token is signed with a key the issuer's key set does not hold.";
  if (error instanceof errors.JWSSignatureVerificationFailed)
    return 'The token signature does not verify.';
  return 'The token is not a valid signed JWT.';
}

function describe(error: unknown): string {
  if (error instanceof errors.JWKSTimeout) return 'timed out';
  const cause = error instanceof Error && error.cause instanceof Error ? error.cause : undefined;
  const code = (cause as NodeJS.ErrnoException | undefined)?.code;
  return code ?? (error instanceof Error ? error.message : String(error));
}
