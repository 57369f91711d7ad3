// Spawns and stops the PostgreSQL binaries for the embedded store: initdb into a data directory, the
// postmaster (optionally in a session of its own) with its log in a file, readiness read from
// postmaster.pid, shutdown by signal, and a new superuser password set in single-user mode. The
// policy — who owns a data directory, what to do with a server found running, when a password is
// reset — is embedded.ts's; who may log in, server-access.ts's.
import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { StartupError } from '../startup-error';
import { isRunning, runningPostmaster } from './embedded-state';
import type { ServerUser } from './server-user';
import { newPassword, SUPERUSER, writeAuthConfig, writePasswordFile } from './server-access';

const LOG_FILE = 'embedded-postgres.log';

/** Where the postmaster's output goes: quoted in errors, so a person knows where to look. */
export function postmasterLogFile(dataDir: string): string {
  return path.join(dataDir, LOG_FILE);
}
const READY_TIMEOUT_MS = 60_000;
const STOP_TIMEOUT_MS = 30_000;

/**
 * Servers we spawned and have not stopped. At exit — an uncaught error, or process.exit() from a
 * signal during startup — each gets SIGINT (PostgreSQL's fast shutdown, which it finishes on its own
 * after we are gone): a detached server would otherwise outlive us. kill -9 skips this; the next
 * start finds the orphan instead.
 */
const spawned = new Set<ChildProcess>();
process.on('exit', () => {
  for (const child of spawned) {
    if (child.pid !== undefined && child.exitCode === null && child.signalCode === null) {
      try {
        process.kill(child.pid, 'SIGINT');
      } catch {
        // Already gone.
      }
    }
  }
});

function spawnOptions(user: ServerUser | undefined) {
  // LC_MESSAGES=C: the log we quote in errors reads the same everywhere.
  const env = { ...process.env, LC_MESSAGES: 'C' };
  return user ? { env, uid: user.uid, gid: user.gid } : { env };
}

/**
 * Runs initdb in a sibling directory and renames it over the (empty) data dir: the cluster appears
 * whole or not at all — its password file and pg_hba.conf included — so a command started meanwhile
 * never sees a half-made one, and of two first starts at once one cluster wins and the other is
 * dropped.
 */
export async function initialise(
  binary: string,
  dataDir: string,
  user: ServerUser | undefined,
  onLog: (line: string) => void,
): Promise<void> {
  const staging = `${dataDir}.initdb-${process.pid}`;
  fs.rmSync(staging, { recursive: true, force: true });
  fs.mkdirSync(staging, { mode: 0o700 });
  if (user) fs.chownSync(staging, user.uid, user.gid);
  try {
    const password = newPassword();
    await initdb(binary, staging, user, password, onLog);
    writeAuthConfig(staging, user);
    writePasswordFile(staging, password);
    try {
      fs.renameSync(staging, dataDir); // replaces an empty directory
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code !== 'ENOTEMPTY' && code !== 'EEXIST') throw error;
      onLog(`${dataDir} was initialised by another process meanwhile; using that one`);
    }
  } finally {
    fs.rmSync(staging, { recursive: true, force: true });
  }
}

async function initdb(
  binary: string,
  dataDir: string,
  user: ServerUser | undefined,
  password: string,
  onLog: (line: string) => void,
): Promise<void> {
  // initdb reads the superuser's password from a file; the server's user must be able to read it,
  // nobody else (mkdtemp makes the directory 0700).
  const pwDir = fs.mkdtempSync(path.join(os.tmpdir(), 'idempotency-proxy-initdb-'));
  const pwFile = path.join(pwDir, 'password');
  fs.writeFileSync(pwFile, `${password}\n`, { mode: 0o600 });
  if (user) {
    fs.chownSync(pwDir, user.uid, user.gid);
    fs.chownSync(pwFile, user.uid, user.gid);
  }
  try {
    const args = [
      `--pgdata=${dataDir}`,
      '--auth-host=scram-sha-256',
      '--auth-local=peer',
      `--username=${SUPERUSER}`,
      `--pwfile=${pwFile}`,
      '--encoding=UTF8',
      '--locale=C',
    ];
    const child = spawn(binary, args, { ...spawnOptions(user), cwd: pwDir, stdio: 'pipe' });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const code = await new Promise<number | null>((resolve, reject) => {
      child.once('error', reject);
      child.once('close', resolve);
    });
    for (const line of output.split('\n')) if (line.trim()) onLog(line);
    if (code !== 0)
      throw new StartupError(
        `initdb failed (exit ${code}) for ${dataDir}: ${lastLines(output, 3)}`,
      );
  } finally {
    fs.rmSync(pwDir, { recursive: true, force: true });
  }
}

/**
 * Gives the superuser `password` in single-user mode: no server running, no connection, no old
 * password needed — how a data dir from an older version (or one whose password file was lost)
 * gets its new password. The statement goes in on stdin, never on a command line.
 */
export async function resetPassword(
  binary: string,
  dataDir: string,
  user: ServerUser | undefined,
  password: string,
): Promise<void> {
  const args = ['--single', '-D', dataDir, '-c', 'password_encryption=scram-sha-256', 'postgres'];
  const child = spawn(binary, args, { ...spawnOptions(user), cwd: dataDir, stdio: 'pipe' });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  // The password is base64url: nothing in it needs quoting inside the literal.
  child.stdin.end(`ALTER ROLE ${SUPERUSER} WITH PASSWORD '${password}'\n`);
  const code = await new Promise<number | null>((resolve, reject) => {
    child.once('error', reject);
    child.once('close', resolve);
  });
  // Single-user mode exits 0 after a failed statement: its ERROR line is the failure.
  if (code !== 0 || /^(ERROR|FATAL|PANIC):/m.test(output))
    throw new StartupError(
      `could not set the embedded PostgreSQL's new password in ${dataDir} (single-user mode, exit ${code}): ${lastLines(output.replaceAll(password, '***'), 3)}`,
    );
}

/** Spawns the postmaster, its output going to a log file in the data dir, and waits until it is ready. */
export async function startPostmaster(
  binary: string,
  dataDir: string,
  port: number,
  settings: readonly string[],
  user: ServerUser | undefined,
  detached: boolean,
): Promise<ChildProcess> {
  const logFile = postmasterLogFile(dataDir);
  // A file, not a pipe: a detached server outlives us when we are killed, and must not lose its log.
  const log = fs.openSync(logFile, 'w', 0o600);
  let child: ChildProcess;
  try {
    child = spawn(binary, ['-D', dataDir, '-p', String(port), ...settings], {
      ...spawnOptions(user),
      cwd: dataDir,
      detached,
      stdio: ['ignore', log, log],
    });
  } finally {
    fs.closeSync(log);
  }
  spawned.add(child);
  child.once('exit', () => spawned.delete(child));
  const exited = new Promise<string>((resolve) => {
    child.once('error', (error) => resolve(error.message));
    child.once('exit', (code, signal) => resolve(signal ? `signal ${signal}` : `exit ${code}`));
  });
  let gone: string | undefined;
  void exited.then((why) => (gone = why));
  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    const postmaster = runningPostmaster(dataDir);
    if (postmaster && postmaster.pid === child.pid && postmaster.status === 'ready') return child;
    if (gone !== undefined || Date.now() > deadline) {
      if (gone === undefined) child.kill('SIGQUIT');
      const tail = lastLines(readOrEmpty(logFile), 3);
      throw new StartupError(
        `the embedded PostgreSQL did not start (${gone ?? 'not ready after 60 s'}): ${tail || '(no output)'} — full log: ${logFile}`,
      );
    }
    await sleep(25);
  }
}

/** SIGINT is PostgreSQL's fast shutdown (roll back, close sessions, checkpoint); SIGQUIT if it hangs. */
export async function stopPostmaster(pid: number, child: ChildProcess | undefined): Promise<void> {
  const gone = (): boolean =>
    child ? child.exitCode !== null || child.signalCode !== null : !isRunning(pid, 'postgres');
  const signal = (name: NodeJS.Signals): void => {
    try {
      process.kill(pid, name);
    } catch {
      // Already gone.
    }
  };
  signal('SIGINT');
  const deadline = Date.now() + STOP_TIMEOUT_MS;
  while (!gone()) {
    if (Date.now() > deadline) {
      signal('SIGQUIT');
      await sleep(1_000);
      return;
    }
    await sleep(25);
  }
}

function readOrEmpty(file: string): string {
  try {
    return fs.readFileSync(file, 'utf8');
  } catch {
    return '';
  }
}

function lastLines(text: string, count: number): string {
  return text
    .split('\n')
    .map((line) => line.trim())
    .filter(Boolean)
    .slice(-count)
    .join(' | ');
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
