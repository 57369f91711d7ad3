// Where the embedded PostgreSQL keeps its data when we run as root. The server runs as the
// `postgres` user, which cannot enter a checkout under a 0700 home, and we never open up a user's
// directories. So a configured data dir that user cannot reach is placed, under the same name plus a
// hash of its configured path, in a state directory it can reach (/var/lib/idempotency-proxy, or
// IDEMPOTENCY_PROXY_STATE_DIR): `npm start` works in any directory, the same checkout finds the same
// data on every start, and the operator commands find the running server through the same rule.
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { ancestorsOf, existingServerUser, firstInaccessible, type ServerUser } from './server-user';

export const DEFAULT_STATE_DIR = '/var/lib/idempotency-proxy';

export interface Placement {
  /** Where the data lives. */
  readonly dataDir: string;
  /** The unreachable directory that made us place it elsewhere; undefined when it is where configured. */
  readonly blockedBy: string | undefined;
}

/**
 * The data dir the server can use: the configured one when `user` (undefined when we are not root)
 * can reach it, else its place in the state directory. Directories not made yet count as reachable:
 * we create them with the default mode.
 */
export function placeDataDir(
  configured: string,
  user: ServerUser | undefined,
  env: NodeJS.ProcessEnv = process.env,
): Placement {
  const dataDir = path.resolve(configured);
  if (!user) return { dataDir, blockedBy: undefined };
  const existing = ancestorsOf(dataDir).filter((dir) => fs.existsSync(dir));
  const blockedBy = firstInaccessible(user, 'x', existing);
  if (blockedBy === undefined) return { dataDir, blockedBy };
  const stateDir = path.resolve(env.IDEMPOTENCY_PROXY_STATE_DIR || DEFAULT_STATE_DIR);
  const hash = createHash('sha256').update(dataDir).digest('hex').slice(0, 12);
  return { dataDir: path.join(stateDir, `${path.basename(dataDir)}-${hash}`), blockedBy };
}

/**
 * Where the data of a configured data dir is, as serve would place it now: for what check, clean
 * and the logs say. (As root before the server's user exists, it is the configured place.)
 */
export function embeddedDataDir(configured: string): string {
  return placeDataDir(configured, existingServerUser()).dataDir;
}
