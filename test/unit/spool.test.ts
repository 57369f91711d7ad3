// The spool's append, remove and read: an append resolves only once its frame is written and
// fdatasync'ed, appends that come together share an fdatasync, what resolved survives a kill -9,
// the live bytes never pass maxBytes, and a failed write or fdatasync is reported, never half-kept.
import fs from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import path from 'node:path';
import {
  Spool,
  SpoolClosed,
  SpoolEntryUnknown,
  SpoolFailed,
  SpoolFull,
  type SpoolOptions,
} from '../../src/store/spool';
import { until } from '../support/eventually';
import { entry, nameOf, startProcess, tempFolder } from '../support/spool';

const OPTIONS: SpoolOptions = { maxBytes: 1 << 24 };

async function openSpool(dir = path.join(tempFolder(), 'spool'), options = OPTIONS) {
  const { spool, recovered } = await Spool.open(dir, options);
  opened.push(spool);
  return { spool, recovered, dir, file: path.join(dir, 'spool.log') };
}
const opened: Spool[] = [];
afterEach(async () => {
  jest.restoreAllMocks();
  await Promise.all(opened.splice(0).map((spool) => spool.close()));
});

/** FileHandle's prototype, to watch or fail its writes and syncs. */
async function fileHandlePrototype(): Promise<FileHandle> {
  const handle = await fs.promises.open(__filename, 'r');
  await handle.close();
  return Object.getPrototypeOf(handle) as FileHandle;
}

/** A promise and the function that settles it. */
function gate(): { readonly opened: Promise<void>; open(): void } {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { opened, open };
}

describe('durability', () => {
  test('an append resolves only after its frame is written and fdatasync has returned', async () => {
    const { spool, file } = await openSpool();
    const proto = await fileHandlePrototype();
    const realSync = proto.datasync;
    const sync = gate();
    const sizeAtSync: number[] = [];
    const spy = jest.spyOn(proto, 'datasync').mockImplementation(async function (this: FileHandle) {
      sizeAtSync.push(fs.statSync(file).size);
      await sync.opened;
      return realSync.call(this);
    });
    let resolved = false;
    const appended = spool.append(entry('a')).then((seq) => {
      resolved = true;
      return seq;
    });
    await until(() => spy.mock.calls.length > 0, 'the fdatasync');
    expect(sizeAtSync).toEqual([Spool.entryBytes(entry('a'))]);
    await new Promise((resolve) => setTimeout(resolve, 30));
    expect(resolved).toBe(false);
    sync.open();
    expect(await appended).toBe(1);
  });

  test('appends that arrive while an fdatasync runs share the next one (group commit)', async () => {
    const { spool } = await openSpool();
    const proto = await fileHandlePrototype();
    const realSync = proto.datasync;
    const firstSync = gate();
    const spy = jest.spyOn(proto, 'datasync').mockImplementation(async function (this: FileHandle) {
      if (spy.mock.calls.length === 1) await firstSync.opened;
      return realSync.call(this);
    });
    const first = spool.append(entry('first'));
    await until(() => spy.mock.calls.length === 1, 'the first fdatasync');
    const waiting = Array.from({ length: 300 }, (_, i) => spool.append(entry(`e${i}`)));
    firstSync.open();
    const seqs = await Promise.all([first, ...waiting]);
    expect(spy).toHaveBeenCalledTimes(2);
    expect(spool.syncCount).toBe(2);
    expect(seqs).toEqual(seqs.map((_, i) => i + 1)); // in call order
  });

  test('appends made together share one fdatasync; appends one after another take one each', async () => {
    const { spool } = await openSpool();
    await Promise.all(Array.from({ length: 500 }, (_, i) => spool.append(entry(`e${i}`))));
    expect(spool.syncCount).toBe(1);
    for (let i = 0; i < 5; i++) await spool.append(entry(`s${i}`));
    expect(spool.syncCount).toBe(6);
  });

  test('every append that resolved in a process killed with -9 is there at the next open', async () => {
    const dir = path.join(tempFolder(), 'spool');
    // Eight appends at a time, so some are in flight (written, not yet synced) at the kill.
    const writer = startProcess(
      `const { Spool } = require(process.env.BUILT_SPOOL);
       Spool.open(process.env.SPOOL_DIR, { maxBytes: 1 << 26 }).then(({ spool }) => {
         let next = 0;
         const loop = async () => {
           for (;;) {
             const name = 'w' + next++;
             const seq = await spool.append({ meta: { name }, blobs: [Buffer.alloc(700, name)] });
             process.stdout.write('appended ' + seq + ' ' + name + '\\n');
           }
         };
         for (let i = 0; i < 8; i++) loop();
       });`,
      { SPOOL_DIR: dir },
    );
    await until(() => writer.lines.length >= 300, '300 appends');
    await writer.killHard();
    const acknowledged = writer.lines.map((line) => line.split(' '));
    const { recovered } = await openSpool(dir);
    const names = new Map(recovered.map(({ seq, entry }) => [seq, entry]));
    for (const [, seq, name] of acknowledged) {
      const spooled = names.get(Number(seq));
      expect(spooled && nameOf(spooled)).toBe(name);
      expect(spooled!.blobs[0]!.equals(Buffer.alloc(700, name))).toBe(true);
    }
    expect(recovered.map(({ seq }) => seq)).toEqual([...names.keys()].sort((a, b) => a - b));
  });
});

describe('remove and read', () => {
  test('a removed entry is no longer live, read or recovered; the others are, in append order', async () => {
    const { spool, dir } = await openSpool();
    const [a, b, c] = [
      await spool.append(entry('a')),
      await spool.append(entry('b', 5_000)),
      await spool.append(entry('c')),
    ];
    expect(await spool.read(b!)).toEqual(entry('b', 5_000));
    spool.remove(b!);
    spool.remove(b!); // twice is fine
    spool.remove(999); // never appended: fine
    await expect(spool.read(b!)).rejects.toBeInstanceOf(SpoolEntryUnknown);
    expect(spool.liveEntries).toBe(2);
    expect(spool.liveBytes).toBe(Spool.entryBytes(entry('a')) + Spool.entryBytes(entry('c')));
    await spool.close();
    const again = await openSpool(dir);
    expect(again.recovered).toEqual([
      { seq: a, entry: entry('a') },
      { seq: c, entry: entry('c') },
    ]);
    expect(again.spool.liveBytes).toBe(spool.liveBytes);
    expect(await again.spool.read(c!)).toEqual(entry('c'));
    expect(await again.spool.append(entry('d'))).toBe(c! + 1);
  });

  test('after close, appends and reads are refused; close again is fine', async () => {
    const { spool } = await openSpool();
    const seq = await spool.append(entry('a'));
    await spool.close();
    await spool.close();
    await expect(spool.append(entry('b'))).rejects.toBeInstanceOf(SpoolClosed);
    await expect(spool.read(seq)).rejects.toBeInstanceOf(SpoolClosed);
  });

  test('close waits for appends already made', async () => {
    const { spool, dir } = await openSpool();
    const appends = [spool.append(entry('a')), spool.append(entry('b'))];
    await spool.close();
    expect(await Promise.all(appends)).toEqual([1, 2]);
    const { recovered } = await openSpool(dir);
    expect(recovered.map(({ entry }) => nameOf(entry))).toEqual(['a', 'b']);
  });
});

describe('bound', () => {
  const size = Spool.entryBytes(entry('x'));

  test('an entry past maxBytes is refused with SpoolFull and writes nothing', async () => {
    const { spool, file } = await openSpool(undefined, { maxBytes: 3 * size });
    for (const name of ['a', 'b', 'c']) await spool.append(entry(name));
    expect(spool.wouldFit(size)).toBe(false);
    const bytes = fs.statSync(file).size;
    await expect(spool.append(entry('d'))).rejects.toBeInstanceOf(SpoolFull);
    await expect(spool.append(entry('d'))).rejects.toThrow(
      `an entry of ${size} bytes does not fit in the spool ${file}: ${3 * size} of its ${3 * size} bytes are live`,
    );
    expect(fs.statSync(file).size).toBe(bytes);
    expect(spool.liveBytes).toBe(3 * size);
    spool.remove(1);
    expect(spool.wouldFit(size)).toBe(true);
    expect(await spool.append(entry('d'))).toBe(4);
  });

  test('appends made together are held to the bound too', async () => {
    const { spool } = await openSpool(undefined, { maxBytes: 3 * size + Math.floor(size / 2) });
    const results = await Promise.allSettled(
      ['a', 'b', 'c', 'd', 'e'].map((name) => spool.append(entry(name))),
    );
    expect(results.map((result) => result.status)).toEqual([
      'fulfilled',
      'fulfilled',
      'fulfilled',
      'rejected',
      'rejected',
    ]);
    expect(spool.liveBytes).toBe(3 * size);
  });

  test('an entry larger than maxBytes on its own is refused', async () => {
    const { spool } = await openSpool(undefined, { maxBytes: 1_000 });
    await expect(spool.append(entry('big', 2_000))).rejects.toBeInstanceOf(SpoolFull);
    expect(spool.liveBytes).toBe(0);
  });
});

describe('failures', () => {
  const failure = (code: string) => Object.assign(new Error(`${code}: simulated`), { code });

  test('a write that fails halfway is reported and cut off; later appends still recover', async () => {
    const { spool, dir } = await openSpool();
    await spool.append(entry('before'));
    const proto = (await fileHandlePrototype()) as unknown as {
      write(buffer: Buffer, offset: number, length: number, position: number): Promise<unknown>;
    };
    const realWrite = proto.write;
    jest.spyOn(proto, 'write').mockImplementationOnce(async function (
      this: FileHandle,
      buffer,
      offset,
      length,
      position,
    ) {
      await realWrite.call(this, buffer, offset, Math.floor(length / 2), position);
      throw failure('ENOSPC');
    });
    const failed = spool.append(entry('failed'));
    await expect(failed).rejects.toBeInstanceOf(SpoolFailed);
    await expect(failed).rejects.toThrow(/ENOSPC/);
    expect(spool.liveEntries).toBe(1);
    await spool.append(entry('after'));
    await spool.close();
    const onTornTail = jest.fn();
    const { recovered } = await openSpool(dir, { ...OPTIONS, onTornTail });
    expect(recovered.map(({ entry }) => nameOf(entry))).toEqual(['before', 'after']);
    expect(onTornTail).not.toHaveBeenCalled();
  });

  test('after a failed fdatasync the spool takes no more appends', async () => {
    const { spool } = await openSpool();
    const proto = await fileHandlePrototype();
    jest.spyOn(proto, 'datasync').mockRejectedValueOnce(failure('EIO'));
    await expect(spool.append(entry('a'))).rejects.toThrow(
      /fdatasync of the spool .* failed \(EIO: simulated\); .* no more appends/,
    );
    await expect(spool.append(entry('b'))).rejects.toBeInstanceOf(SpoolFailed);
    expect(spool.liveEntries).toBe(0);
  });
});
