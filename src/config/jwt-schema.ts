// auth.jwt: the key set and the claims a bearer token is verified against; compiled by
// compiler/jwt-config.ts.
import { z } from 'zod';
import { duration, opt, pattern, quotedText, strict, timer } from './schema-formats';

// Asymmetric algorithms only: a JWKS holds public keys, and an HMAC secret shared with every
// client would let any of them mint another's principal.
export const JWT_ALGORITHMS = [
  'RS256',
  'RS384',
  'RS512',
  'PS256',
  'PS384',
  'PS512',
  'ES256',
  'ES384',
  'ES512',
  'EdDSA',
  'Ed25519',
] as const;
export const oneOrMore = (what: string) =>
  z.union([quotedText, z.array(quotedText).min(1, { error: `expected at least one ${what}` })], {
    error: `expected ${what} or a list of them`,
  });

export const jwtSchema = strict(
  {
    jwks: pattern(
      /^\S+$/,
      'expected an https:// URL of a JSON Web Key Set, or a path to a JWKS file',
      'URL or file',
    ).describe(
      "The issuer's public keys: an http(s):// URL (fetched, cached, fetched again for an unknown kid) or a JWKS file, relative to the config file.",
    ),
    issuer: oneOrMore('an issuer').describe(
      'Accepted iss values (exact match), e.g. https://auth.example.com/.',
    ),
    audience: oneOrMore('an audience').describe(
      'Accepted aud values: a token minted for another service is refused.',
    ),
    algorithms: opt(
      z
        .array(z.enum(JWT_ALGORITHMS, { error: `expected one of ${JWT_ALGORITHMS.join(', ')}` }))
        .min(1, { error: 'expected at least one algorithm' }),
      'Accepted signature algorithms (asymmetric only).',
      ['RS256', 'ES256'],
    ),
    clockSkew: opt(duration({}), 'Leeway for exp and nbf between the issuer and this host.', '30s'),
    cooldown: opt(
      duration({}),
      'After a fetch, how long a token with an unknown kid is refused before the URL is fetched again.',
      '30s',
    ),
    refresh: opt(
      timer,
      'How often the URL is fetched again in the background (a failed fetch keeps the keys it had).',
      '10m',
    ),
  },
  'JWT settings (jwks, issuer, audience, algorithms, clockSkew, cooldown, refresh)',
);
