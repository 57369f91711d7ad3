// Rewrites a spool file with only its live frames, so a file whose entries are mostly removed
// shrinks without ever losing one that is not:
//
//   copy the live frames, in order, to the scratch file ─► fsync it ─► rename it over the file
//   (the caller fsyncs the directory before it acknowledges any later append)
//
// A crash before the rename leaves the old file whole (the scratch file is removed at the next
// open); after it, the new file is whole, since it was synced first. Frames are copied byte for
// byte: seqs and order stay, so the file reads back as the old one did minus its dead frames.
import { type FileHandle, rename, rm } from 'node:fs/promises';
import { readAt, writeAt } from './file-io';
import { createPrivateFile } from './private-files';

/** Copy at most this much per read: neighbouring frames go together. */
const RUN_BYTES = 1 << 20;

export interface FramePlace {
  readonly seq: number;
  readonly offset: number;
  readonly bytes: number;
}

export interface Rewritten {
  /** Open on the new file, which now has the spool's name. */
  readonly handle: FileHandle;
  readonly bytes: number;
  /** Each frame's offset in the new file, by seq. */
  readonly offsets: ReadonlyMap<number, number>;
}

/** Rewrites `file` (open as `from`) with `frames`, in the order given, through `scratch`. */
export async function rewriteWith(
  from: FileHandle,
  frames: readonly FramePlace[],
  file: string,
  scratch: string,
): Promise<Rewritten> {
  const handle = await createPrivateFile(scratch);
  try {
    const offsets = new Map<number, number>();
    let written = 0;
    // A run: frames that lie back to back in the old file, copied with one read and one write.
    let run = { offset: 0, bytes: 0 };
    const copyRun = async (): Promise<void> => {
      if (run.bytes === 0) return;
      const bytes = await readAt(from, run.offset, run.bytes);
      if (bytes.length < run.bytes) throw new Error(`${file} ended inside a live frame`);
      await writeAt(handle, bytes, written);
      written += bytes.length;
    };
    for (const frame of frames) {
      if (frame.offset !== run.offset + run.bytes || run.bytes + frame.bytes > RUN_BYTES) {
        await copyRun();
        run = { offset: frame.offset, bytes: 0 };
      }
      offsets.set(frame.seq, written + run.bytes);
      run.bytes += frame.bytes;
    }
    await copyRun();
    await handle.sync();
    await rename(scratch, file);
    return { handle, bytes: written, offsets };
  } catch (error) {
    await handle.close();
    await rm(scratch, { force: true });
    throw error;
  }
}
