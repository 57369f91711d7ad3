// The spool's directory and files are private to the process's user: a spool holds stored answers
// (bodies, Set-Cookie headers). What this module creates it makes 0700 / 0600 whatever the umask;
// what it finds already there it does not quietly fix, it refuses with the path, the mode and the
// command that fixes it, since a loose mode there means someone else set it up that way.
import { constants, type Stats } from 'node:fs';
import { chmod, type FileHandle, mkdir, open, stat, statfs } from 'node:fs/promises';
import path from 'node:path';
import { messageOf, SpoolRefused } from './errors';

const DIRECTORY_MODE = 0o700;
const FILE_MODE = 0o600;
/** Group or others may read or write. */
const SHARED_BITS = 0o066;

/**
 * File systems where a unix socket does not reach a process on another host (the lock would take a
 * live holder elsewhere for a dead one) and fsync promises less: statfs f_type values (linux/magic.h).
 */
const NETWORK_FILE_SYSTEMS: ReadonlyMap<number, string> = new Map([
  [0x6969, 'NFS'],
  [0x517b, 'SMB'],
  [0xff534d42, 'CIFS'],
  [0xfe534d42, 'SMB2'],
]);

/** Any failure while opening, as a SpoolRefused that says what was being done. */
export function refusal(error: unknown, doing: string): SpoolRefused {
  if (error instanceof SpoolRefused) return error;
  return new SpoolRefused(`cannot ${doing}: ${messageOf(error)}`, error);
}

/**
 * Creates `dir` (and its parents) as 0700, or checks the one there, and opens it: the handle is for
 * fsyncing entries made in it, and for reaching it by a short path (directory-lock.ts).
 */
export async function openPrivateDirectory(dir: string): Promise<FileHandle> {
  const created = await makeDirectories(dir);
  const handle = await open(dir, constants.O_RDONLY | constants.O_DIRECTORY);
  try {
    checkPrivate(dir, await handle.stat(), 'directory');
    await refuseNetworkFileSystem(dir);
    // The new directories' entries in their parents, so the spool file is not lost with them.
    for (const made of created) await syncDirectoryAt(path.dirname(made));
    return handle;
  } catch (error) {
    await handle.close();
    throw error;
  }
}

/**
 * Makes the directories missing on the way to `dir` one by one, each chmod'ed 0700: mkdir's mode
 * passes through the umask, and one that takes the owner's write bit would leave a parent nobody
 * can create the next level in. Returns them, outermost first.
 */
async function makeDirectories(dir: string): Promise<string[]> {
  const missing: string[] = [];
  for (let at = dir; !(await isDirectory(at, dir)); at = path.dirname(at)) missing.unshift(at);
  for (const made of missing) {
    try {
      await mkdir(made, { mode: DIRECTORY_MODE });
    } catch (error) {
      // Made meanwhile by someone else: checked like any directory found there.
      if ((error as NodeJS.ErrnoException).code === 'EEXIST') continue;
      throw refusal(error, `create the spool directory ${dir}`);
    }
    await chmod(made, DIRECTORY_MODE);
  }
  return missing;
}

/** Whether `at`, on the way to `dir`, is a directory (false when nothing is there). */
async function isDirectory(at: string, dir: string): Promise<boolean> {
  try {
    if ((await stat(at)).isDirectory()) return true;
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return false;
    if (code !== 'ENOTDIR') throw refusal(error, `look for the spool directory ${dir}`);
  }
  throw new SpoolRefused(
    `cannot use ${dir} as the spool directory: it or one of its parents is a file, not a directory`,
  );
}

/**
 * Opens the file at `file` for reading and writing: created 0600 when absent, else checked like the
 * directory. Never follows a symbolic link.
 */
export async function openPrivateFile(
  file: string,
): Promise<{ readonly handle: FileHandle; readonly created: boolean }> {
  const { O_RDWR, O_CREAT, O_EXCL, O_NOFOLLOW } = constants;
  try {
    const handle = await open(file, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW, FILE_MODE);
    await closeOnError(handle, () => handle.chmod(FILE_MODE));
    return { handle, created: true };
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
  }
  let handle: FileHandle;
  try {
    handle = await open(file, O_RDWR | O_NOFOLLOW);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ELOOP')
      throw new SpoolRefused(`${file} is a symbolic link; the spool file must be a regular file`);
    throw error;
  }
  await closeOnError(handle, async () => checkPrivate(file, await handle.stat(), 'file'));
  return { handle, created: false };
}

/** A new file at `file`, 0600, emptied if one was there (a leftover of an interrupted rewrite). */
export async function createPrivateFile(file: string): Promise<FileHandle> {
  const { O_RDWR, O_CREAT, O_TRUNC, O_NOFOLLOW } = constants;
  const handle = await open(file, O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW, FILE_MODE);
  await closeOnError(handle, () => handle.chmod(FILE_MODE));
  return handle;
}

async function closeOnError(handle: FileHandle, work: () => Promise<void>): Promise<void> {
  try {
    await work();
  } catch (error) {
    await handle.close();
    throw error;
  }
}

function checkPrivate(where: string, stats: Stats, kind: 'directory' | 'file'): void {
  if (kind === 'directory' ? !stats.isDirectory() : !stats.isFile())
    throw new SpoolRefused(`${where} is not a ${kind === 'file' ? 'regular file' : kind}`);
  const uid = process.getuid?.();
  if (uid !== undefined && stats.uid !== uid)
    throw new SpoolRefused(
      `the spool ${kind} ${where} is owned by uid ${stats.uid}, not by this process's uid ${uid}; ` +
        `a spool holds stored answers: chown ${uid} ${where}, or give this process a spool ` +
        `directory of its own`,
    );
  const mode = stats.mode & 0o777;
  if ((mode & SHARED_BITS) !== 0)
    throw new SpoolRefused(
      `the spool ${kind} ${where} has mode ${mode.toString(8).padStart(4, '0')}, which lets ` +
        `group or others read or write it; a spool holds stored answers: ` +
        `chmod ${kind === 'directory' ? '700' : '600'} ${where}`,
    );
}

async function refuseNetworkFileSystem(dir: string): Promise<void> {
  if (process.platform !== 'linux') return;
  const kind = NETWORK_FILE_SYSTEMS.get((await statfs(dir)).type);
  if (kind !== undefined)
    throw new SpoolRefused(
      `the spool directory ${dir} is on ${kind}, a network file system: its lock cannot see a ` +
        `process on another host; put the spool on a local disk`,
    );
}

/** Makes the entries created in a directory durable (its handle's sync() does the same). */
async function syncDirectoryAt(dir: string): Promise<void> {
  const handle = await open(dir, constants.O_RDONLY | constants.O_DIRECTORY);
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}
