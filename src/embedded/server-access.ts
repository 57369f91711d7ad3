// Who can reach the embedded PostgreSQL, and how. Other users of the machine must not: a login as its
// superuser reads every stored answer, forges the ones replayed, and runs programs as the server's
// user. So:
//   TCP       127.0.0.1 only, scram-sha-256 with a random password made at initdb (never a known one)
//   password  <dataDir>/idempotency-proxy.password, mode 0600, owned by the proxy's user
//   socket    in the data directory (mode 0700), not /tmp: only the server's user (and root) reach
//             it; peer authentication maps them to the superuser, so an operator needs no password
// pg_hba.conf and pg_ident.conf are ours, rewritten at every start. A data dir made by an older
// version (password "postgres", `password` lines for everyone) has no password file: its superuser
// gets a new password at the next start (embedded.ts), without the old one being needed.
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { StartupError } from '../startup-error';
import type { ServerUser } from './server-user';

export const SUPERUSER = 'postgres';
const PASSWORD_FILE = 'idempotency-proxy.password';
/** sun_path holds 108 bytes with its NUL on Linux (104 on macOS): a longer socket path cannot be bound. */
const MAX_SOCKET_PATH = process.platform === 'linux' ? 107 : 103;

export function passwordFile(dataDir: string): string {
  return path.join(dataDir, PASSWORD_FILE);
}

/** 32 random bytes, URL-safe: it goes into postgres:// URLs as it is. */
export function newPassword(): string {
  return randomBytes(32).toString('base64url');
}

/** The superuser's password, or undefined when the data dir has no password file (an older version's). */
export function readPassword(dataDir: string): string | undefined {
  try {
    return fs.readFileSync(passwordFile(dataDir), 'utf8').trim();
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return undefined;
    throw new StartupError(
      `cannot read the embedded PostgreSQL's password in ${passwordFile(dataDir)} (${code ?? (error as Error).message}): run this as the user that runs the proxy, or set DATABASE_URL`,
      { cause: error },
    );
  }
}

/**
 * Writes the password file in `dir` (a data dir, or the one initdb is making), mode 0600 and owned
 * by this process's user: a temp file renamed over it, so it is never seen half-written.
 */
export function writePasswordFile(dir: string, password: string): void {
  const file = passwordFile(dir);
  const staging = `${file}.${process.pid}`;
  fs.rmSync(staging, { force: true });
  fs.writeFileSync(staging, `${password}\n`, { mode: 0o600, flag: 'wx' });
  fs.renameSync(staging, file);
}

/** `postgres://postgres:<password>@127.0.0.1:<port>/postgres`. */
export function embeddedUrl(port: number, password: string): string {
  return `postgres://${SUPERUSER}:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`;
}

/**
 * What to tell a person to use for DATABASE_URL, without printing the password: a shell expression
 * reading it from the file.
 */
export function embeddedUrlHint(dataDir: string, port: number): string {
  return `"postgres://${SUPERUSER}:$(cat ${passwordFile(dataDir)})@127.0.0.1:${port}/postgres"`;
}

/**
 * Writes pg_hba.conf and pg_ident.conf: peer on the socket for the server's user and this process's
 * (root, when the server runs as `postgres`), the password on 127.0.0.1, nothing else. Owned by the
 * server's user, which must read them.
 */
export function writeAuthConfig(dataDir: string, user: ServerUser | undefined): void {
  const osUsers = new Set([...processUserName(), ...(user ? [user.name] : [])]);
  const hba = `# Written by idempotency-proxy at every start of its embedded PostgreSQL: edits are replaced.
# The socket is in this directory (mode 0700): only its owner and root can reach it, and they log in
# as ${SUPERUSER} without a password (pg_ident.conf). TCP listens on 127.0.0.1 only and needs the
# password in ${PASSWORD_FILE}.
# TYPE  DATABASE  USER  ADDRESS       METHOD
local   all       all                 peer map=owner
host    all       all   127.0.0.1/32  scram-sha-256
`;
  const ident = `# Written by idempotency-proxy at every start of its embedded PostgreSQL: edits are replaced.
# MAPNAME  SYSTEM-USERNAME  PG-USERNAME
${[...osUsers].map((name) => `owner      ${name}  ${SUPERUSER}`).join('\n')}
`;
  for (const [name, text] of [
    ['pg_hba.conf', hba],
    ['pg_ident.conf', ident],
  ] as const) {
    const file = path.join(dataDir, name);
    fs.writeFileSync(file, text, { mode: 0o600 });
    fs.chmodSync(file, 0o600); // an existing file keeps its mode through writeFileSync
    if (user) fs.chownSync(file, user.uid, user.gid);
  }
}

/** This process's user name; none for a uid without a passwd entry (some containers). */
function processUserName(): string[] {
  try {
    return [os.userInfo().username];
  } catch {
    return [];
  }
}

/**
 * The postmaster's settings that decide who reaches it, given on its command line so that neither
 * postgresql.conf nor ALTER SYSTEM changes them; `socket` false when the data dir's path is too long
 * for a socket (then only TCP).
 */
export function accessSettings(dataDir: string, port: number): { args: string[]; socket: boolean } {
  const socket = socketFits(dataDir, port);
  return {
    args: [
      '-c',
      'listen_addresses=127.0.0.1',
      '-c',
      // Quoted: the setting is a comma-separated list, and a directory may hold a comma or a space.
      `unix_socket_directories=${socket ? `"${dataDir}"` : ''}`,
      '-c',
      'unix_socket_permissions=0700',
      '-c',
      'password_encryption=scram-sha-256',
    ],
    socket,
  };
}

function socketFits(dataDir: string, port: number): boolean {
  return (
    !dataDir.includes('"') && Buffer.byteLength(`${dataDir}/.s.PGSQL.${port}`) <= MAX_SOCKET_PATH
  );
}
