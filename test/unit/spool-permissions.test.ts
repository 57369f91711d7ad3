// A spool holds stored answers, so its directory is 0700 and its file 0600 whatever the umask, and
// one found open to group or others, or owned by another user, is refused with the path, the mode
// and the fix. Anything else that makes a directory unusable (a file in its place, no write
// permission, a link for the file, a bad bound) is a SpoolRefused that says so, never another error.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { Spool, SpoolRefused } from '../../src/store/spool';
import { testUnless } from '../support/run-report';
import { tempFolder } from '../support/spool';

const OPTIONS = { maxBytes: 1 << 20 };
const asRoot = process.getuid?.() === 0;
const NOBODY = 65534;

/** Opens and closes the spool in `dir`: only to see that it opens. */
async function opens(dir: string): Promise<void> {
  const { spool } = await Spool.open(dir, OPTIONS);
  await spool.close();
}

function modeOf(file: string): number {
  return fs.statSync(file).mode & 0o777;
}

/** The SpoolRefused that opening `dir` meets (fails the test if it opens, or fails otherwise). */
async function refusal(dir: string, options = OPTIONS): Promise<string> {
  const error: unknown = await Spool.open(dir, options).then(
    async ({ spool }) => {
      await spool.close();
      return new Error(`${dir} opened`);
    },
    (thrown: unknown) => thrown,
  );
  expect(error).toBeInstanceOf(SpoolRefused);
  return (error as SpoolRefused).message;
}

test('the directory is made 0700 and the file 0600 even under a umask that takes more away', async () => {
  const dir = path.join(tempFolder(), 'a', 'b', 'spool');
  const umask = process.umask(0o277); // would leave the directory 0500: not even writable
  try {
    await opens(dir);
  } finally {
    process.umask(umask);
  }
  for (const made of [dir, path.dirname(dir), path.dirname(path.dirname(dir))])
    expect(modeOf(made)).toBe(0o700);
  expect(modeOf(path.join(dir, 'spool.log'))).toBe(0o600);
  await opens(dir);
});

test('an existing directory that group or others may read or write is refused with the fix', async () => {
  const dir = tempFolder();
  for (const mode of [0o755, 0o750, 0o702]) {
    fs.chmodSync(dir, mode);
    const octal = mode.toString(8).padStart(4, '0');
    expect(await refusal(dir)).toBe(
      `the spool directory ${dir} has mode ${octal}, which lets group or others read or write ` +
        `it; a spool holds stored answers: chmod 700 ${dir}`,
    );
  }
  fs.chmodSync(dir, 0o711); // others may pass through, not list or change it
  await opens(dir);
});

test('an existing spool file that group or others may read is refused; fixed, it opens', async () => {
  const dir = tempFolder();
  const file = path.join(dir, 'spool.log');
  fs.writeFileSync(file, '');
  fs.chmodSync(file, 0o640);
  expect(await refusal(dir)).toBe(
    `the spool file ${file} has mode 0640, which lets group or others read or write it; a spool ` +
      `holds stored answers: chmod 600 ${file}`,
  );
  fs.chmodSync(file, 0o600);
  await opens(dir); // the refusal let go of the lock and everything it opened
});

testUnless(!asRoot && 'not root: cannot give a file to another user', 'spool-permissions.test.ts')(
  'a directory or spool file owned by another user is refused with the fix',
  async () => {
    const dir = tempFolder();
    fs.chownSync(dir, NOBODY, NOBODY);
    expect(await refusal(dir)).toBe(
      `the spool directory ${dir} is owned by uid ${NOBODY}, not by this process's uid 0; a ` +
        `spool holds stored answers: chown 0 ${dir}, or give this process a spool directory of ` +
        `its own`,
    );
    fs.chownSync(dir, 0, 0);
    const file = path.join(dir, 'spool.log');
    fs.writeFileSync(file, '', { mode: 0o600 });
    fs.chownSync(file, NOBODY, NOBODY);
    expect(await refusal(dir)).toMatch(`the spool file ${file} is owned by uid ${NOBODY}`);
  },
);

test('a file where the directory should be, or above it, is refused', async () => {
  const file = path.join(tempFolder(), 'not-a-directory');
  fs.writeFileSync(file, '');
  for (const dir of [file, path.join(file, 'spool')])
    expect(await refusal(dir)).toBe(
      `cannot use ${dir} as the spool directory: it or one of its parents is a file, not a directory`,
    );
});

/** Makes `dir` unwritable even for root (chattr +i); undefined when that is not possible here. */
function immutable(dir: string): (() => void) | undefined {
  if (spawnSync('chattr', ['+i', dir]).status !== 0) return undefined;
  return () => spawnSync('chattr', ['-i', dir]);
}
const probe = tempFolder();
const canMakeImmutable = asRoot ? immutable(probe) : undefined;
canMakeImmutable?.();

testUnless(
  asRoot && !canMakeImmutable && 'chattr +i does not work here (root writes through modes)',
  'spool-permissions.test.ts',
)('a directory that cannot be written is refused', async () => {
  const dir = tempFolder();
  const undo = asRoot
    ? immutable(dir)!
    : (fs.chmodSync(dir, 0o500), () => fs.chmodSync(dir, 0o700));
  try {
    expect(await refusal(dir)).toMatch(
      new RegExp(
        `^cannot lock the spool directory ${dir} \\(a unix socket in it\\): .*(EPERM|EACCES)`,
      ),
    );
    expect(await refusal(path.join(dir, 'sub'))).toMatch(
      new RegExp(`^cannot create the spool directory ${dir}/sub: .*(EPERM|EACCES)`),
    );
  } finally {
    undo();
  }
});

test('a spool file that is a symbolic link, or a directory, is refused', async () => {
  const dir = tempFolder();
  const elsewhere = path.join(tempFolder(), 'elsewhere');
  fs.writeFileSync(elsewhere, '', { mode: 0o600 });
  fs.symlinkSync(elsewhere, path.join(dir, 'spool.log'));
  expect(await refusal(dir)).toBe(
    `${dir}/spool.log is a symbolic link; the spool file must be a regular file`,
  );
  fs.unlinkSync(path.join(dir, 'spool.log'));
  fs.mkdirSync(path.join(dir, 'spool.log'));
  expect(await refusal(dir)).toMatch(`cannot open the spool in ${dir}: EISDIR`);
});

test('a bound that is not a positive whole number of bytes is refused', async () => {
  const dir = tempFolder();
  for (const maxBytes of [0, -1, 1.5, Number.NaN, Infinity])
    expect(await refusal(dir, { maxBytes })).toBe(
      `a spool's maxBytes must be a positive whole number, not ${maxBytes}`,
    );
});
