// auth.jwt and the routes scoped by a verified token's claim (tenant: [jwt:<claim>]): a claim needs
// keys to verify with, and the key set is read here, relative to the config.
import path from 'node:path';
import type { IdempotencyBlock, ParsedConfig } from '../config/schema';
import type { JwtConfig } from '../config/types';
import { readJwksFile } from '../config/jwks-file';
import { parseDurationMs } from '../config/units';
import { JWT_PREFIX } from '../idempotency/tenant';
import type { IssuePath, PathIssue } from '../config/path-issue';

/** A `jwt:<claim>` tenant part needs keys to verify tokens with: refused at the part without auth.jwt. */
export function checkJwtTenants(parsed: ParsedConfig): PathIssue[] {
  if (parsed.auth?.jwt !== undefined) return [];
  const blocks: [IssuePath, IdempotencyBlock | undefined][] = [
    [['defaults'], parsed.defaults],
    ...parsed.routes.map((route, i): [IssuePath, IdempotencyBlock | undefined] => [
      ['routes', i, 'idempotency'],
      typeof route.idempotency === 'object' ? route.idempotency : undefined,
    ]),
  ];
  return blocks.flatMap(([at, block]) =>
    (block?.tenant ?? []).flatMap((part, j) =>
      part.startsWith(JWT_PREFIX)
        ? [
            {
              path: [...at, 'tenant', j],
              message: `${part} scopes keys by a claim of the verified bearer token: configure auth.jwt (jwks, issuer, audience) so tokens can be verified`,
            },
          ]
        : [],
    ),
  );
}

/** auth.jwt with its units converted; a JWKS file is read and checked here, relative to the config. */
export function compileJwt(
  block: NonNullable<ParsedConfig['auth']>['jwt'],
  baseDir: string,
  issues: PathIssue[],
): JwtConfig | null {
  if (block === undefined) return null;
  const list = (value: string | string[]): string[] => (Array.isArray(value) ? value : [value]);
  const remote = /^https?:\/\//i.test(block.jwks);
  let jwks: JwtConfig['jwks'];
  if (remote) jwks = { kind: 'url', url: block.jwks };
  else {
    const file = path.resolve(baseDir, block.jwks);
    const keySet = readJwksFile(file, ['auth', 'jwt', 'jwks'], issues);
    jwks = { kind: 'file', file, keySet: keySet ?? { keys: [] } };
  }
  return {
    jwks,
    issuer: list(block.issuer),
    audience: list(block.audience),
    algorithms: block.algorithms ?? ['RS256', 'ES256'],
    clockSkewMs: parseDurationMs(block.clockSkew ?? '30s'),
    cooldownMs: parseDurationMs(block.cooldown ?? '30s'),
    refreshMs: parseDurationMs(block.refresh ?? '10m'),
  };
}
