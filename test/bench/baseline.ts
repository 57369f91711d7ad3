// --baseline <git-ref> (npm run bench, npm run bench:instructions): a second build of the proxy,
// from another commit, measured in the same run as the current one.
//
// The ref is checked out into a temporary git worktree (`git worktree add --detach`) and built with
// the proxy's own `npx tsc -p tsconfig.json`. Its dependencies are the current checkout's
// node_modules (a symlink) when its package-lock.json is the same; when the lockfile differs it
// gets its own (`npm ci`), because a build measured on another build's dependencies may not even
// run (a commit from before a major undici upgrade calls the new undici with the old handler API).
// The built tree (without .git) is copied to
// <os.tmpdir()>/idempotency-proxy-baseline/<commit>/ and the worktree removed — at once, and also on
// a failure or a Ctrl-C — so a second run with the same commit starts from the cache in no time.
// The bench itself (test/bench) is always the current checkout's: only the proxy comes from the ref.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { type Build, ROOT, say } from './stack';

export const BASELINE_CACHE = path.join(os.tmpdir(), 'idempotency-proxy-baseline');
const MARKER = '.bench-baseline.json';

interface Marker {
  readonly ref: string;
  readonly commit: string;
  readonly builtAt: string;
  readonly buildWarning?: string;
  /** 'own': installed from the commit's own lockfile, kept in the cache with it. */
  readonly dependencies?: 'own' | 'current checkout';
}

/** What exists only while the baseline is being built: removed by finishBuild or the exit hook. */
const pending: { worktree?: string; parent?: string; partial?: string; tsc?: ChildProcess } = {};
let exitHookInstalled = false;

/**
 * The baseline build for `ref`: from the cache when that commit was built before, else checked out,
 * built and cached. Throws when the ref names no commit or the build emits no dist/main.js.
 */
export async function prepareBaseline(ref: string): Promise<Build> {
  const commit = resolveCommit(ref);
  const short = commit.slice(0, 9);
  const label = `baseline ${ref} (${short})`;
  const dir = path.join(BASELINE_CACHE, commit);
  const cached = readMarker(dir);
  // A cache entry from before the bench told dependencies apart may hold the wrong ones: built anew.
  if (cached?.dependencies && fs.existsSync(path.join(dir, 'dist', 'main.js'))) {
    if (cached.dependencies !== 'own') linkNodeModules(dir);
    say(`baseline ${ref} = ${short}: built before, from ${dir}`);
    return build(label, dir, ref, commit, true, cached.buildWarning);
  }

  if (!exitHookInstalled) {
    // A Ctrl-C (the benches' handlers end with process.exit) or a crash mid-build: leave nothing.
    process.on('exit', removePending);
    exitHookInstalled = true;
  }
  const started = Date.now();
  pending.parent = fs.mkdtempSync(path.join(os.tmpdir(), 'idempotency-proxy-baseline-worktree-'));
  const worktree = path.join(pending.parent, 'tree');
  say(`baseline ${ref} = ${short}: git worktree add --detach ${worktree}…`);
  git(['worktree', 'add', '--detach', worktree, commit]);
  pending.worktree = worktree;
  try {
    const dependencies = sameLockfile(worktree) ? 'current checkout' : 'own';
    if (dependencies === 'own') {
      say(`baseline ${short}: its package-lock.json differs from this checkout's: npm ci…`);
      const install = await run('npm', ['ci', '--no-audit', '--no-fund'], worktree);
      if (install.code !== 0) {
        throw new Error(`the baseline ${ref} (${short}): npm ci failed:\n${install.output}`);
      }
    } else {
      linkNodeModules(worktree);
    }
    say(
      `baseline ${short}: npx tsc -p tsconfig.json (node_modules: ${dependencies === 'own' ? 'its own' : "the current checkout's"})…`,
    );
    const { code, output } = await run('npx', ['tsc', '-p', 'tsconfig.json'], worktree);
    let buildWarning: string | undefined;
    if (code !== 0) {
      if (!fs.existsSync(path.join(worktree, 'dist', 'main.js'))) {
        throw new Error(`the baseline ${ref} (${short}) does not build:\n${output}`);
      }
      // tsc emits despite type errors: measure the emitted proxy, and say so.
      const errors = output.split('\n').filter((line) => /error TS\d+/.test(line));
      buildWarning = `tsc exited ${code} with ${errors.length} type error(s), output emitted: ${errors.slice(0, 3).join(' | ')}`;
      say(`baseline ${short}: WARNING: ${buildWarning}`);
    }
    fs.mkdirSync(BASELINE_CACHE, { recursive: true });
    pending.partial = `${dir}.partial-${process.pid}`;
    fs.cpSync(worktree, pending.partial, {
      recursive: true,
      filter: (source) => !['.git', 'node_modules'].includes(path.relative(worktree, source)),
    });
    if (dependencies === 'own') {
      // Moved, not copied: the workspace links inside are relative, so they still point into the tree.
      fs.renameSync(
        path.join(worktree, 'node_modules'),
        path.join(pending.partial, 'node_modules'),
      );
    }
    const marker: Marker = {
      ref,
      commit,
      builtAt: new Date().toISOString(),
      buildWarning,
      dependencies,
    };
    fs.writeFileSync(path.join(pending.partial, MARKER), `${JSON.stringify(marker, null, 2)}\n`);
    fs.rmSync(dir, { recursive: true, force: true }); // a half-made one without its marker
    fs.renameSync(pending.partial, dir);
    pending.partial = undefined;
    if (dependencies !== 'own') linkNodeModules(dir);
    say(
      `baseline ${short}: built in ${((Date.now() - started) / 1000).toFixed(0)} s, cached in ${dir}`,
    );
    return build(label, dir, ref, commit, false, buildWarning);
  } finally {
    removePending();
  }
}

function build(
  label: string,
  root: string,
  ref: string,
  commit: string,
  cached: boolean,
  buildWarning: string | undefined,
): Build {
  return {
    name: 'baseline',
    label,
    root,
    distDir: path.join(root, 'dist'),
    ref,
    commit,
    cached,
    buildWarning,
  };
}

function resolveCommit(ref: string): string {
  try {
    return git(['rev-parse', '--verify', '--quiet', `${ref}^{commit}`]).trim();
  } catch {
    throw new Error(`--baseline ${ref}: not a commit in ${ROOT}`);
  }
}

function readMarker(dir: string): Marker | undefined {
  try {
    return JSON.parse(fs.readFileSync(path.join(dir, MARKER), 'utf8')) as Marker;
  } catch {
    return undefined;
  }
}

/** Whether the checked-out commit locks the same dependencies as the current checkout. */
function sameLockfile(worktree: string): boolean {
  const lockfile = (root: string): string | undefined => {
    try {
      return fs.readFileSync(path.join(root, 'package-lock.json'), 'utf8');
    } catch {
      return undefined;
    }
  };
  const theirs = lockfile(worktree);
  return theirs !== undefined && theirs === lockfile(ROOT);
}

/** The same lockfile: the current checkout's node_modules serves the baseline too. */
function linkNodeModules(dir: string): void {
  const link = path.join(dir, 'node_modules');
  fs.rmSync(link, { force: true });
  fs.symlinkSync(fs.realpathSync(path.join(ROOT, 'node_modules')), link, 'dir');
}

function git(args: readonly string[]): string {
  return execFileSync('git', [...args], {
    cwd: ROOT,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}

function run(
  command: string,
  args: readonly string[],
  cwd: string,
): Promise<{ code: number; output: string }> {
  return new Promise((resolve, reject) => {
    // Its own process group (npx runs tsc under a shell): removePending kills all of it.
    const child = spawn(command, [...args], {
      cwd,
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    pending.tsc = child;
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.once('error', reject);
    child.once('exit', (code, signal) => {
      pending.tsc = undefined;
      resolve({ code: code ?? (signal ? 128 : 1), output: output.trim() });
    });
  });
}

/** Synchronous, so the exit hook can use it: the worktree, its temp dir, a half-copied cache. */
function removePending(): void {
  if (pending.tsc?.pid !== undefined) {
    try {
      process.kill(-pending.tsc.pid, 'SIGKILL');
    } catch {
      // exited already
    }
  }
  pending.tsc = undefined;
  if (pending.worktree) {
    try {
      git(['worktree', 'remove', '--force', pending.worktree]);
    } catch {
      // removed by hand, or never fully added: prune forgets it below
    }
    pending.worktree = undefined;
  }
  if (pending.parent) {
    fs.rmSync(pending.parent, { recursive: true, force: true });
    pending.parent = undefined;
    try {
      git(['worktree', 'prune']);
    } catch {
      // nothing to prune
    }
  }
  if (pending.partial) {
    fs.rmSync(pending.partial, { recursive: true, force: true });
    pending.partial = undefined;
  }
}
