// What open() recovers from a real spool file after a crash: the live entries of every whole frame
// before the first bad one. A torn, corrupt or garbage tail (a short frame, a changed byte, zeros,
// garbage, a stale frame behind a newer one) is cut off, onTornTail hears of it once, and open
// still succeeds. Nothing after a bad frame is believed, not even whole frames.
import fs from 'node:fs';
import path from 'node:path';
import { Spool, type TornTail } from '../../src/store/spool';
import { encodeEntry, encodeRemoval } from '../../src/store/spool/frame';
import { entry, nameOf, tempFolder } from '../support/spool';

const REMOVAL_BYTES = encodeRemoval(1).length;

/** Opens the spool in `dir`, closes it, and says what it recovered and what onTornTail heard. */
async function reopen(dir: string) {
  const torn: TornTail[] = [];
  const { spool, recovered } = await Spool.open(dir, {
    maxBytes: 1 << 20,
    onTornTail: (info) => torn.push(info),
  });
  await spool.close();
  return {
    names: recovered.map(({ entry }) => nameOf(entry)),
    seqs: recovered.map(({ seq }) => seq),
    torn,
    fileBytes: fs.statSync(path.join(dir, 'spool.log')).size,
  };
}

/** A spool file holding a, b and c (in frames of these sizes), made by the spool itself. */
async function spoolOfThree(): Promise<{ dir: string; file: string; sizes: number[] }> {
  const dir = tempFolder();
  const { spool } = await Spool.open(dir, { maxBytes: 1 << 20 });
  for (const name of ['a', 'b', 'c']) await spool.append(entry(name));
  await spool.close();
  const sizes = ['a', 'b', 'c'].map((name) => Spool.entryBytes(entry(name)));
  return { dir, file: path.join(dir, 'spool.log'), sizes };
}

test('a frame cut short is dropped, the file cut back to the frame before it, onTornTail told once', async () => {
  const { dir, file, sizes } = await spoolOfThree();
  const [a, b, c] = sizes as [number, number, number];
  fs.truncateSync(file, a + b + c - 5);
  const first = await reopen(dir);
  expect(first.names).toEqual(['a', 'b']);
  expect(first.torn).toEqual([
    {
      file,
      keptEntries: 2,
      droppedBytes: c - 5,
      reason: `frame at byte ${a + b}: cut short: it needs ${c} bytes, the file has ${c - 5}`,
    },
  ]);
  expect(first.fileBytes).toBe(a + b);
  const second = await reopen(dir);
  expect(second.names).toEqual(['a', 'b']);
  expect(second.torn).toEqual([]);
});

test('cut at any byte, a file gives back exactly the frames wholly before the cut', async () => {
  // a, b, removal of a, c: as frames end, the live entries are [a], [a b], [b], [b c].
  const dir = tempFolder();
  const { spool } = await Spool.open(dir, { maxBytes: 1 << 20 });
  const a = await spool.append(entry('a', 3));
  await spool.append(entry('b', 3));
  spool.remove(a);
  await spool.append(entry('c', 3));
  await spool.close();
  const whole = fs.readFileSync(path.join(dir, 'spool.log'));
  const size = Spool.entryBytes(entry('a', 3));
  const ends = [size, 2 * size, 2 * size + REMOVAL_BYTES, 3 * size + REMOVAL_BYTES];
  expect(whole.length).toBe(ends[3]);
  const liveAfter = [[], ['a'], ['a', 'b'], ['b'], ['b', 'c']];
  for (let cut = 0; cut <= whole.length; cut++) {
    fs.writeFileSync(path.join(dir, 'spool.log'), whole.subarray(0, cut));
    const framesWhole = ends.filter((end) => end <= cut).length;
    const { names, torn } = await reopen(dir);
    expect({ cut, names }).toEqual({ cut, names: liveAfter[framesWhole] });
    expect({ cut, torn: torn.length }).toEqual({
      cut,
      torn: ends.includes(cut) || cut === 0 ? 0 : 1,
    });
  }
});

test('a changed byte in the middle keeps the frames before it and drops all from there', async () => {
  const { dir, file, sizes } = await spoolOfThree();
  const [a, b, c] = sizes as [number, number, number];
  const bytes = fs.readFileSync(file);
  bytes[a + 20]! ^= 0xff;
  fs.writeFileSync(file, bytes);
  const { names, torn, fileBytes } = await reopen(dir);
  expect(names).toEqual(['a']); // c is whole, but comes after the bad frame
  expect(torn).toEqual([
    { file, keptEntries: 1, droppedBytes: b + c, reason: `frame at byte ${a}: checksum mismatch` },
  ]);
  expect(fileBytes).toBe(a);
});

test('garbage after the last frame is cut off', async () => {
  const { dir, file, sizes } = await spoolOfThree();
  const good = sizes.reduce((sum, size) => sum + size, 0);
  const garbage = [
    Buffer.from('garbage, as a write of something else might leave it'),
    Buffer.from([0xff, 0xff, 0xff, 0x7f, 1, 2, 3, 4, 5, 6, 7, 8, 9]),
    Buffer.from([9, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]),
  ];
  for (const tail of garbage) {
    fs.appendFileSync(file, tail);
    const { names, torn, fileBytes } = await reopen(dir);
    expect(names).toEqual(['a', 'b', 'c']);
    expect(torn).toHaveLength(1);
    expect(torn[0]).toMatchObject({ keptEntries: 3, droppedBytes: tail.length });
    expect(torn[0]!.reason).toMatch(new RegExp(`^frame at byte ${good}: `));
    expect(fileBytes).toBe(good);
  }
});

test('an empty file recovers nothing and is no news', async () => {
  const dir = tempFolder();
  fs.writeFileSync(path.join(dir, 'spool.log'), '', { mode: 0o600 });
  expect(await reopen(dir)).toMatchObject({ names: [], torn: [], fileBytes: 0 });
});

test('a file of zeros recovers nothing and is cut to empty', async () => {
  const dir = tempFolder();
  const file = path.join(dir, 'spool.log');
  fs.writeFileSync(file, Buffer.alloc(8192), { mode: 0o600 });
  expect(await reopen(dir)).toEqual({
    names: [],
    seqs: [],
    torn: [
      {
        file,
        keptEntries: 0,
        droppedBytes: 8192,
        reason: 'frame at byte 0: impossible payload length 0',
      },
    ],
    fileBytes: 0,
  });
});

test('zeros after whole frames (a size written before its data) are cut off', async () => {
  const { dir, file, sizes } = await spoolOfThree();
  fs.appendFileSync(file, Buffer.alloc(4096));
  const { names, torn, fileBytes } = await reopen(dir);
  expect(names).toEqual(['a', 'b', 'c']);
  expect(torn).toHaveLength(1);
  expect(fileBytes).toBe(sizes.reduce((sum, size) => sum + size, 0));
});

test('a whole frame whose seq goes back is a stale leftover, not believed', async () => {
  const dir = tempFolder();
  const file = path.join(dir, 'spool.log');
  const newer = encodeEntry(5, entry('newer'));
  fs.writeFileSync(file, Buffer.concat([newer, encodeEntry(3, entry('stale'))]), { mode: 0o600 });
  const { names, seqs, torn } = await reopen(dir);
  expect(names).toEqual(['newer']);
  expect(seqs).toEqual([5]);
  expect(torn[0]!.reason).toBe(`frame at byte ${newer.length}: seq 3 after seq 5`);
});

test('seqs go on after the highest one in the file, removed or not', async () => {
  const { dir } = await spoolOfThree();
  const { spool, recovered } = await Spool.open(dir, { maxBytes: 1 << 20 });
  spool.remove(recovered[2]!.seq);
  expect(await spool.append(entry('d'))).toBe(4);
  await spool.close();
  expect((await reopen(dir)).seqs).toEqual([1, 2, 4]);
});
