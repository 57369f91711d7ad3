// The packages as npm publishes them: `npm pack` of the proxy and of the client workspace, and
// `npm install` of tarballs into an empty folder with no checkout, as a user of the registry would.
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

export const REPO_ROOT = path.resolve(__dirname, '../..');
export const CLIENT_DIR = path.join(REPO_ROOT, 'packages/client');

/** One file of `npm pack --json`. */
export interface PackedFile {
  readonly path: string;
  readonly size: number;
  readonly mode: number;
}

/** What `npm pack --json` reports for one package. */
export interface Packed {
  readonly name: string;
  readonly version: string;
  readonly filename: string;
  readonly size: number;
  readonly entryCount: number;
  readonly files: readonly PackedFile[];
}

/**
 * The environment for a nested npm: without the npm_* variables `npm test` sets for its script
 * (npm_config_local_prefix and the like would point the nested npm back at this checkout).
 */
export function npmEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env = Object.fromEntries(
    Object.entries(process.env).filter(([name]) => !/^npm_/i.test(name)),
  );
  return { ...env, ...extra };
}

export async function npm(args: readonly string[], cwd: string): Promise<string> {
  const { stdout } = await run('npm', [...args], {
    cwd,
    env: npmEnv(),
    maxBuffer: 64 * 1024 * 1024,
  });
  return stdout;
}

/**
 * Packs `dir` (the proxy, or a workspace folder) into `destination`, or only lists what it would
 * pack when `destination` is undefined. --ignore-scripts: the suite's global setup has built both
 * packages already, so prepack's build would only repeat it.
 */
export async function pack(dir: string, destination?: string): Promise<Packed> {
  const where = destination === undefined ? ['--dry-run'] : ['--pack-destination', destination];
  const out = await npm(['pack', '--json', '--ignore-scripts', ...where], dir);
  const [packed] = JSON.parse(out) as Packed[];
  if (!packed) throw new Error(`npm pack printed no package:\n${out}`);
  return packed;
}

/** npm's usual cache, so an install in a fresh folder fetches the registry's packages only once. */
export async function npmCache(): Promise<string> {
  return (await npm(['config', 'get', 'cache'], REPO_ROOT)).trim();
}

/**
 * A fresh folder `dir` with a package.json of its own and `tarballs` installed into it without
 * running any package's install script.
 */
export async function installTarballs(dir: string, tarballs: readonly string[]): Promise<void> {
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(
    path.join(dir, 'package.json'),
    `${JSON.stringify({ name: 'consumer', version: '1.0.0', private: true })}\n`,
  );
  await npm(
    [
      'install',
      '--ignore-scripts',
      '--no-audit',
      '--no-fund',
      '--cache',
      await npmCache(),
      ...tarballs,
    ],
    dir,
  );
}
