// One process per spool directory. Node has no flock(), so the lock is a unix-domain socket that the
// holder listens on in the directory, named holder-<pid>-<random>.sock. An opener binds its own
// socket under another name (binder-…), and gives it the holder's name only once it listens: a
// holder's name never stands for a socket bound but not listening yet, which a connect would find
// refused and an opener would remove as a dead holder's. Then it connects to every other one there:
//
//   connects       the owner is alive (the kernel completes a unix connect for a live listener, even
//                  one that is stopped or busy): the directory is in use, refuse
//   ECONNREFUSED   nobody listens: the owner died (kill -9 leaves the file behind); remove it
//   ENOENT         it went away meanwhile
//
// A binder-… file is left only by a process killed between its bind and its rename: removed once it
// is a minute old.
//
// Liveness is never judged by pid, so a container's new process 1 is not mistaken for its dead
// process 1; the pid in the name is only for the message. Two holders cannot coexist: each binds
// before it looks, so of two openers the later sees the earlier. Two opening at the same moment may
// each see the other: both step back (close their socket), wait a random while and look again; one
// that still sees another after a few rounds refuses (both may, in a tie; neither takes the lock).
//
// A socket's path must fit sun_path (107 bytes and a NUL): a longer one is reached through
// /proc/self/fd/<directory's fd>/, which is short. Limits: the directory must be local (a socket file
// on NFS does not reach a process on another host; private-files.ts refuses those file systems); a
// process that shares the machine but not the file system view (another mount namespace over the
// same volume) still connects, as the socket is the volume's inode.
import { existsSync } from 'node:fs';
import { chmod, type FileHandle, readdir, rename, rm, stat } from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { SpoolRefused } from './errors';

/** A unix socket path's longest, without its NUL (sizeof sun_path is 108 on Linux). */
const MAX_SOCKET_PATH_BYTES = 107;
const SOCKET_MODE = 0o600;
const HOLDER_NAME = /^holder-(\d+)-[0-9a-f]+\.sock$/;
/** A socket not listening yet (see above), or the leftover of a process killed in that moment. */
const BINDER_NAME = /^binder-\d+-[0-9a-f]+\.sock$/;
/** A binder file older than this is a leftover: nobody takes that long between bind and rename. */
const LEFTOVER_BINDER_MS = 60_000;
/** Rounds of stepping back before an opener that keeps seeing a live holder refuses. */
const ROUNDS = 3;
const STEP_BACK_MS = { min: 20, max: 80 };
/** A connect to a live unix socket answers at once; a slower one is taken for alive. */
const PROBE_TIMEOUT_MS = 2_000;

export interface DirectoryLock {
  /** Stops listening and removes the socket file; idempotent. */
  release(): Promise<void>;
}

/** Directories locked by this process (device:inode): a second open here refuses without a round. */
const lockedHere = new Set<string>();

export async function lockDirectory(dir: string, directory: FileHandle): Promise<DirectoryLock> {
  const { dev, ino } = await directory.stat();
  const identity = `${dev}:${ino}`;
  if (lockedHere.has(identity)) throw inUse(dir, process.pid);
  lockedHere.add(identity);
  try {
    const suffix = `${process.pid}-${randomBytes(6).toString('hex')}.sock`;
    const name = `holder-${suffix}`;
    const binderName = `binder-${suffix}`;
    const file = path.join(dir, name);
    const binding = path.join(dir, binderName);
    const reach = socketPaths(dir, directory.fd);
    for (let round = 1; ; round++) {
      const server = await listen(reach(binderName));
      let holder: number | undefined;
      try {
        // Connecting needs write permission on the socket file, which a tight umask may take away.
        await chmod(binding, SOCKET_MODE);
        // Listening already: only now may others see it as a holder (a renamed socket still listens).
        await rename(binding, file);
        holder = await liveHolder(dir, name, reach);
      } catch (error) {
        await stopListening(server, file);
        await rm(binding, { force: true });
        throw error;
      }
      if (holder === undefined) return heldBy(server, file, identity);
      await stopListening(server, file);
      if (round === ROUNDS) throw inUse(dir, holder);
      const { min, max } = STEP_BACK_MS;
      await new Promise((resolve) => setTimeout(resolve, min + Math.random() * (max - min)));
    }
  } catch (error) {
    lockedHere.delete(identity);
    throw error;
  }
}

function heldBy(server: net.Server, file: string, identity: string): DirectoryLock {
  let released: Promise<void> | undefined;
  return {
    release: () =>
      (released ??= stopListening(server, file).finally(() => {
        lockedHere.delete(identity);
      })),
  };
}

function inUse(dir: string, pid: number): SpoolRefused {
  return new SpoolRefused(
    pid === process.pid
      ? `the spool directory ${dir} is already open in this process (pid ${pid}); open it once`
      : `the spool directory ${dir} is in use by another proxy process (pid ${pid}); give each ` +
          `process its own spool directory (store.outbox.spool)`,
  );
}

/** How to reach a socket named `name` in `dir`: its path, or a short one through the directory's fd. */
function socketPaths(dir: string, fd: number): (name: string) => string {
  // Every holder name has the same length, so one name decides for all.
  const sample = path.join(dir, `holder-${process.pid}-${'0'.repeat(12)}.sock`);
  if (Buffer.byteLength(sample) <= MAX_SOCKET_PATH_BYTES) return (name) => path.join(dir, name);
  const viaFd = `/proc/self/fd/${fd}`;
  if (existsSync(viaFd)) return (name) => `${viaFd}/${name}`;
  throw new SpoolRefused(
    `the spool directory ${dir} is too long a path for its lock socket (${Buffer.byteLength(sample)} ` +
      `bytes, at most ${MAX_SOCKET_PATH_BYTES}) and /proc is not there to shorten it; choose a ` +
      `shorter path`,
  );
}

/** The pid of a live holder other than `own`; removes the sockets of dead ones. */
async function liveHolder(
  dir: string,
  own: string,
  reach: (name: string) => string,
): Promise<number | undefined> {
  for (const name of await readdir(dir)) {
    if (BINDER_NAME.test(name)) {
      await removeLeftoverBinder(path.join(dir, name));
      continue;
    }
    const pid = HOLDER_NAME.exec(name)?.[1];
    if (pid === undefined || name === own) continue;
    if (await answers(reach(name))) return Number(pid);
    await rm(path.join(dir, name), { force: true });
  }
  return undefined;
}

/** Removes a binder file old enough to be a killed process's leftover; a young one is left be. */
async function removeLeftoverBinder(file: string): Promise<void> {
  try {
    if (Date.now() - (await stat(file)).mtimeMs > LEFTOVER_BINDER_MS)
      await rm(file, { force: true });
  } catch {
    // Gone meanwhile, or not ours to judge: it does not stand in anyone's way.
  }
}

/** Whether a process listens on the socket; anything but "nobody there" counts as yes. */
function answers(socketPath: string): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(socketPath);
    const done = (alive: boolean): void => {
      clearTimeout(timer);
      socket.destroy();
      resolve(alive);
    };
    const timer = setTimeout(() => done(true), PROBE_TIMEOUT_MS);
    socket.once('connect', () => done(true));
    socket.once('error', (error: NodeJS.ErrnoException) =>
      done(error.code !== 'ECONNREFUSED' && error.code !== 'ENOENT'),
    );
  });
}

function listen(socketPath: string): Promise<net.Server> {
  return new Promise((resolve, reject) => {
    // A probe only needs the connect to complete; nothing is said.
    const server = net.createServer((socket) => socket.destroy());
    server.once('error', reject);
    server.listen(socketPath, () => {
      server.off('error', reject);
      // A failed accept (EMFILE under load) is emitted on the server; the socket still listens,
      // so the lock still holds.
      server.on('error', () => undefined);
      // Holding the lock must not keep a process alive that has nothing else to do.
      server.unref();
      resolve(server);
    });
  });
}

/** Stops listening and removes the socket file (Node's close does too, but not on every platform). */
async function stopListening(server: net.Server, file: string): Promise<void> {
  await new Promise<void>((resolve) => server.close(() => resolve()));
  await rm(file, { force: true });
}
