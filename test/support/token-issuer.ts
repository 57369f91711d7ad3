// A local token issuer for tests of routes scoped by a claim: key pairs generated with jose, a JWKS
// served over real HTTP on port 0 (its key set can be rotated, its fetches are counted), and tokens
// signed with any of its keys — or with a key it never published.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, generateKeyPair, type JWK, type JWTPayload, SignJWT } from 'jose';

export const ISSUER = 'https://issuer.test/';
export const AUDIENCE = 'refunds-api';

export interface SigningKey {
  readonly kid: string;
  readonly alg: 'RS256' | 'ES256';
  readonly privateKey: Awaited<ReturnType<typeof generateKeyPair>>['privateKey'];
  readonly jwk: JWK;
}

export async function signingKey(kid: string, alg: 'RS256' | 'ES256'): Promise<SigningKey> {
  const { publicKey, privateKey } = await generateKeyPair(alg, { extractable: true });
  const jwk = { ...(await exportJWK(publicKey)), kid, alg, use: 'sig' };
  return { kid, alg, privateKey, jwk };
}

export interface TokenOptions {
  readonly issuer?: string;
  readonly audience?: string;
  /** Seconds from now; negative: already expired. */
  readonly expiresIn?: number;
  /** Sign with this key but name another kid in the header. */
  readonly kid?: string;
}

export function token(key: SigningKey, claims: JWTPayload, options: TokenOptions = {}) {
  const now = Math.floor(Date.now() / 1000);
  return new SignJWT(claims)
    .setProtectedHeader({ alg: key.alg, kid: options.kid ?? key.kid })
    .setIssuer(options.issuer ?? ISSUER)
    .setAudience(options.audience ?? AUDIENCE)
    .setIssuedAt(now)
    .setJti(Math.random().toString(36).slice(2))
    .setExpirationTime(now + (options.expiresIn ?? 300))
    .sign(key.privateKey);
}

export interface JwksServer {
  readonly url: string;
  /** GETs of the key set so far. */
  fetches(): number;
  /** What the next fetch returns. */
  publish(keys: readonly SigningKey[]): void;
  close(): Promise<void>;
}

export async function startJwksServer(keys: readonly SigningKey[]): Promise<JwksServer> {
  let published = keys;
  let fetches = 0;
  const server = http.createServer((_req, res) => {
    fetches++;
    res.writeHead(200, { 'content-type': 'application/jwk-set+json' });
    res.end(JSON.stringify({ keys: published.map((key) => key.jwk) }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/.well-known/jwks.json`,
    fetches: () => fetches,
    publish: (next) => {
      published = next;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
