// A spool file does not grow forever: once nothing is live it is cut to empty, and when dead frames
// dominate (more dead bytes than live, in a file past compactMinFileBytes) the live frames are
// rewritten to a new file that replaces it by rename. Nothing live is lost on the way, reads and
// appends made meanwhile are served, and a rewrite interrupted by a crash leaves the old file whole.
import fs from 'node:fs';
import path from 'node:path';
import { COMPACTING_FILE, Spool, type SpoolOptions } from '../../src/store/spool';
import { eventually } from '../support/eventually';
import { comparable, entry, nameOf, tempFolder } from '../support/spool';

const BODY_BYTES = 64 * 1024;
const FRAME_BYTES = Spool.entryBytes(entry('e0', BODY_BYTES));

/** The frames of entries named e<i>, one for each i. */
function framesOf(indexes: number[]): number {
  return indexes.reduce((sum, i) => sum + Spool.entryBytes(entry(`e${i}`, BODY_BYTES)), 0);
}

const opened: Spool[] = [];
afterEach(async () => {
  jest.restoreAllMocks();
  await Promise.all(opened.splice(0).map((spool) => spool.close()));
});

function fileOf(dir: string): fs.Stats {
  return fs.statSync(path.join(dir, 'spool.log'));
}

/** A spool in a new folder holding `count` entries e0, e1, … of BODY_BYTES each, and their seqs. */
async function spoolWith(count: number, options: Partial<SpoolOptions> = {}) {
  const dir = tempFolder();
  const { spool } = await Spool.open(dir, { maxBytes: 1 << 28, ...options });
  opened.push(spool);
  const seqs = await Promise.all(
    Array.from({ length: count }, (_, i) => spool.append(entry(`e${i}`, BODY_BYTES))),
  );
  return { dir, spool, seqs };
}

async function namesIn(dir: string): Promise<string[]> {
  const { spool, recovered } = await Spool.open(dir, { maxBytes: 1 << 28 });
  await spool.close();
  return recovered.map(({ entry }) => nameOf(entry));
}

test('once nothing is live the file is cut to empty', async () => {
  const { dir, spool, seqs } = await spoolWith(3);
  expect(fileOf(dir).size).toBe(3 * FRAME_BYTES);
  for (const seq of seqs) spool.remove(seq);
  await eventually(() => expect(fileOf(dir).size).toBe(0));
  expect(await spool.append(entry('next'))).toBe(4);
  await spool.close();
  expect(await namesIn(dir)).toEqual(['next']);
});

test('when dead bytes pass live ones in a file over 1 MiB, the live frames are rewritten to a new file', async () => {
  const { dir, spool, seqs } = await spoolWith(40); // 2.6 MB
  const before = fileOf(dir);
  const kept = seqs.filter((_, i) => i % 4 === 1); // 10, with gaps between them
  for (const seq of seqs) if (!kept.includes(seq)) spool.remove(seq);
  await eventually(() => expect(fileOf(dir).size).toBe(framesOf(kept.map((_, i) => 4 * i + 1))));
  expect(fileOf(dir).ino).not.toBe(before.ino); // a new file, renamed over the old
  expect(fs.readdirSync(dir).filter((name) => !name.endsWith('.sock'))).toEqual(['spool.log']);
  for (const [i, seq] of kept.entries())
    expect(comparable(await spool.read(seq))).toEqual(
      comparable(entry(`e${4 * i + 1}`, BODY_BYTES)),
    );
  await spool.append(entry('after', BODY_BYTES));
  await spool.close();
  expect(await namesIn(dir)).toEqual([...kept.map((_, i) => `e${4 * i + 1}`), 'after']);
});

test('a rewrite syncs the new file before it renames it over the old, and the directory after', async () => {
  const { dir, spool, seqs } = await spoolWith(4, { compactMinFileBytes: 1_000 });
  const handle = await fs.promises.open(__filename, 'r');
  await handle.close();
  const proto = Object.getPrototypeOf(handle) as fs.promises.FileHandle;
  const events: string[] = [];
  const realSync = proto.sync;
  jest.spyOn(proto, 'sync').mockImplementation(async function (this: fs.promises.FileHandle) {
    events.push('sync');
    return realSync.call(this);
  });
  const realRename = fs.promises.rename;
  jest.spyOn(fs.promises, 'rename').mockImplementation(async (from, to) => {
    events.push('rename');
    return realRename(from, to);
  });
  for (const seq of seqs.slice(1)) spool.remove(seq);
  await eventually(() => expect(fileOf(dir).size).toBe(FRAME_BYTES));
  await spool.close();
  expect(events).toEqual(['sync', 'rename', 'sync']);
});

test('a file under compactMinFileBytes, or one mostly live, is not rewritten', async () => {
  const small = await spoolWith(12); // 790 KB
  for (const seq of small.seqs.slice(0, 11)) small.spool.remove(seq);
  const mostlyLive = await spoolWith(30); // 2 MB
  for (const seq of mostlyLive.seqs.slice(0, 14)) mostlyLive.spool.remove(seq);
  const inodes = [fileOf(small.dir).ino, fileOf(mostlyLive.dir).ino];
  await small.spool.close();
  await mostlyLive.spool.close();
  expect(fileOf(small.dir).size).toBeGreaterThan(12 * FRAME_BYTES);
  expect(fileOf(mostlyLive.dir).size).toBeGreaterThan(30 * FRAME_BYTES);
  expect([fileOf(small.dir).ino, fileOf(mostlyLive.dir).ino]).toEqual(inodes);
});

test('reads and appends made while a rewrite runs are served, and kept', async () => {
  const { dir, spool, seqs } = await spoolWith(60, { compactMinFileBytes: 100_000 });
  const kept = seqs.slice(50);
  for (const seq of seqs.slice(0, 50)) spool.remove(seq);
  const reads = kept.map((seq) => spool.read(seq));
  const appends = ['x', 'y', 'z'].map((name) => spool.append(entry(name, BODY_BYTES)));
  const read = await Promise.all(reads);
  expect(read.map(nameOf)).toEqual(kept.map((_, i) => `e${50 + i}`));
  await Promise.all(appends);
  await eventually(() => expect(fileOf(dir).size).toBeLessThan(14 * FRAME_BYTES));
  for (const [i, seq] of kept.entries()) expect(nameOf(await spool.read(seq))).toBe(`e${50 + i}`);
  await spool.close();
  expect(await namesIn(dir)).toEqual([...kept.map((_, i) => `e${50 + i}`), 'x', 'y', 'z']);
});

test('a file that dead frames dominate is rewritten at open', async () => {
  const { dir, spool, seqs } = await spoolWith(10, { compactMinFileBytes: Infinity });
  for (const seq of seqs.slice(1)) spool.remove(seq);
  await spool.close();
  expect(fileOf(dir).size).toBeGreaterThan(10 * FRAME_BYTES);
  const reopened = await Spool.open(dir, { maxBytes: 1 << 28, compactMinFileBytes: 100_000 });
  expect(fileOf(dir).size).toBe(FRAME_BYTES);
  expect(reopened.recovered.map(({ entry }) => nameOf(entry))).toEqual(['e0']);
  expect(nameOf(await reopened.spool.read(reopened.recovered[0]!.seq))).toBe('e0');
  await reopened.spool.close();
});

test('a rewrite cut short by a crash leaves the old file, and its scratch file is removed at open', async () => {
  const { dir, spool } = await spoolWith(3);
  await spool.close();
  const scratch = path.join(dir, COMPACTING_FILE);
  fs.writeFileSync(scratch, fs.readFileSync(path.join(dir, 'spool.log')).subarray(0, 100));
  expect(await namesIn(dir)).toEqual(['e0', 'e1', 'e2']);
  expect(fs.existsSync(scratch)).toBe(false);
});
