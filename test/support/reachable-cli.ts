// The built CLI where another user can run it. A test that runs the CLI as the `postgres` user (the
// suite as root) needs node, dist/ and node_modules on paths that user can enter; a checkout in a
// 0700 home or clone, or a Node installed under one, is not. Then the test gets a copy in a temp
// folder any user can enter: dist/, package.json and the production dependencies (hard links where
// the file system allows, so it costs a directory walk, not 50 MB), and node itself when needed.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ancestorsOf, firstInaccessible, type ServerUser } from '../../src/embedded/server-user';
import { PROXY_BIN } from './proxy-process';

const ROOT = path.resolve(__dirname, '../..');

export interface ReachableCli {
  /** The node binary and the CLI's entry, as the argv that runs the CLI. */
  readonly launcher: readonly string[];
  /** Deletes the copy, if one was made. */
  remove(): void;
}

/** Where `user` cannot run `file` from: the first folder it cannot enter, or the file unreadable. */
function blocked(user: ServerUser, file: string): string | undefined {
  return firstInaccessible(user, 'x', ancestorsOf(file)) ?? firstInaccessible(user, 'r', [file]);
}

/** `node dist/main.js` as it is when `user` reaches both; otherwise a copy it reaches. */
export function reachableCli(user: ServerUser): ReachableCli {
  const nodeBlocked = blocked(user, process.execPath);
  const cliBlocked = blocked(user, PROXY_BIN);
  if (nodeBlocked === undefined && cliBlocked === undefined)
    return { launcher: [process.execPath, PROXY_BIN], remove: () => undefined };
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ip-reachable-cli-'));
  fs.chmodSync(dir, 0o755); // mkdtemp made it 0700
  let node = process.execPath;
  if (nodeBlocked !== undefined) {
    node = path.join(dir, 'node');
    linkOrCopy(fs.realpathSync(process.execPath), node);
  }
  let bin = PROXY_BIN;
  if (cliBlocked !== undefined) {
    fs.cpSync(path.join(ROOT, 'dist'), path.join(dir, 'dist'), { recursive: true });
    fs.copyFileSync(path.join(ROOT, 'package.json'), path.join(dir, 'package.json'));
    fs.mkdirSync(path.join(dir, 'node_modules'));
    for (const name of productionPackages())
      linkOrCopy(path.join(ROOT, 'node_modules', name), path.join(dir, 'node_modules', name));
    bin = path.join(dir, 'dist', 'main.js');
  }
  return { launcher: [node, bin], remove: () => fs.rmSync(dir, { recursive: true, force: true }) };
}

/** The top-level folders of node_modules that `npm ci --omit=dev` would install, from the lockfile. */
function productionPackages(): string[] {
  const lock = JSON.parse(fs.readFileSync(path.join(ROOT, 'package-lock.json'), 'utf8')) as {
    packages: Record<string, { dev?: boolean; link?: boolean }>;
  };
  return Object.entries(lock.packages)
    .filter(([key, entry]) => /^node_modules\/(@[^/]+\/)?[^/]+$/.test(key) && !entry.dev)
    .map(([key]) => key.slice('node_modules/'.length))
    .filter((name) => fs.existsSync(path.join(ROOT, 'node_modules', name)));
}

/** Hard links (cp -al) when `from` and `to` share a file system; a copy otherwise. */
function linkOrCopy(from: string, to: string): void {
  fs.mkdirSync(path.dirname(to), { recursive: true });
  try {
    execFileSync('cp', ['-al', from, to], { stdio: 'ignore' });
  } catch {
    fs.rmSync(to, { recursive: true, force: true });
    fs.cpSync(from, to, { recursive: true, verbatimSymlinks: true });
  }
}
