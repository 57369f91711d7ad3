// The spool: a local, crash-safe, append-only log of entries that must outlive this process until
// the caller says they are no longer needed. It knows nothing of what an entry means.
//
//   append ─► queued ─► written with its batch ─► fdatasync ─► resolves with its seq: durable, live
//   remove ─► live no more; a removal frame is queued, never synced (a removed entry that comes
//             back after a crash is harmless: the caller makes replaying one idempotent)
//   open   ─► lock the directory ─► read the file to its last whole frame, cut what follows
//             ─► the live entries, in append order
//
// Appends share fdatasyncs (group commit, frame-writer.ts). What an append costs, measured 2026-12
// on this project's 2-core VM (ext4 on virtio, Node 26, entries of 1.1 KB):
//
//   one at a time      0.6-2.2 ms each, one fdatasync each (0.35 ms on tmpfs, where it is free)
//   500 at once        18-28 ms for all 500, one fdatasync (40-55 µs each)
//   2000 at once       45-52 ms for all, one fdatasync
//   one per event-loop turn, 1000 of them: ~50 ms, 5-7 fdatasyncs
//
// A disk with a volatile write cache but honest flushes pays its flush latency per batch instead.
// Reopening a file of 4000 such entries (4.5 MB) takes 30-100 ms.
//
// The file stays small: once nothing is live it is cut to empty; when dead frames dominate (more
// dead bytes than live, and past compactMinFileBytes) the live frames are rewritten to a new file
// that replaces it atomically (compact.ts). Appends wait while that runs.
import { type FileHandle, rm } from 'node:fs/promises';
import path from 'node:path';
import { rewriteWith } from './compact';
import { type DirectoryLock, lockDirectory } from './directory-lock';
import { SpoolClosed, SpoolEntryUnknown, SpoolFailed, SpoolFull, SpoolRefused } from './errors';
import { readAt } from './file-io';
import {
  encodeEntry,
  encodeRemoval,
  entryFrameBytes,
  FRAME_HEADER_BYTES,
  MAX_PAYLOAD_BYTES,
  readFrame,
  type SpoolEntry,
} from './frame';
import { FrameWriter } from './frame-writer';
import { openPrivateDirectory, openPrivateFile, refusal } from './private-files';
import { type FileReading, readSpoolFile } from './read-file';

export type { SpoolEntry };

export const SPOOL_FILE = 'spool.log';
/** Where a rewrite builds the new file before it takes the spool's name. */
export const COMPACTING_FILE = 'spool.log.compacting';
const DEFAULT_COMPACT_MIN_FILE_BYTES = 1 << 20;
const MAX_FRAME_BYTES = FRAME_HEADER_BYTES + MAX_PAYLOAD_BYTES;

/** What open() found past the last whole frame, and cut off. */
export interface TornTail {
  readonly file: string;
  /** Live entries kept from before it. */
  readonly keptEntries: number;
  readonly droppedBytes: number;
  readonly reason: string;
}

export interface SpoolOptions {
  /**
   * The most live bytes (entries appended and not removed, each counted as its frame's size:
   * Spool.entryBytes). An append past it is refused. A spool reopened with a lower bound keeps what
   * it recovers and refuses appends until enough is removed.
   */
  readonly maxBytes: number;
  /** Called once by open() when the file ended in a torn or corrupt frame (cut off): log it. */
  readonly onTornTail?: (info: TornTail) => void;
  /** A file smaller than this is never rewritten to drop dead frames. Default 1 MiB. */
  readonly compactMinFileBytes?: number;
}

export interface RecoveredEntry {
  readonly seq: number;
  readonly entry: SpoolEntry;
}

interface Placement {
  readonly bytes: number;
  /** Where its frame is in the file; undefined while the append waits to be written. */
  offset: number | undefined;
}

export class Spool {
  /** Live entries by seq, in append order, queued ones included. */
  private readonly placements = new Map<number, Placement>();
  /** Reads under way: the file they read must not be cut or closed under them. */
  private readonly reads = new Set<Promise<unknown>>();
  private live = 0;
  /** The live bytes that are in the file (the rest are queued): the file's other bytes are dead. */
  private liveInFile = 0;
  private closing: Promise<void> | undefined;
  /** After a failed rewrite, the file size at which one is tried again. */
  private nextRewriteAt = 0;
  private readonly writer: FrameWriter;

  private constructor(
    private readonly file: string,
    private readonly directory: FileHandle,
    private readonly lock: DirectoryLock,
    handle: FileHandle,
    fileBytes: number,
    private nextSeq: number,
    private readonly options: SpoolOptions,
  ) {
    this.writer = new FrameWriter(file, handle, fileBytes, () => this.tidy());
  }

  /**
   * Opens (creating it if need be) the spool in `dir`, takes its lock and reads what it holds.
   * Throws SpoolRefused, with what to do about it, when the directory cannot be used.
   */
  static async open(
    dir: string,
    options: SpoolOptions,
  ): Promise<{ spool: Spool; recovered: RecoveredEntry[] }> {
    checkOptions(options);
    const where = path.resolve(dir);
    const file = path.join(where, SPOOL_FILE);
    const directory = await openPrivateDirectory(where).catch((error: unknown) => {
      throw refusal(error, `open the spool directory ${where}`);
    });
    let lock: DirectoryLock | undefined;
    let handle: FileHandle | undefined;
    let spool: Spool | undefined;
    try {
      lock = await lockDirectory(where, directory).catch((error: unknown) => {
        throw refusal(error, `lock the spool directory ${where} (a unix socket in it)`);
      });
      await rm(path.join(where, COMPACTING_FILE), { force: true });
      const opened = await openPrivateFile(file);
      handle = opened.handle;
      // A new file's name must be durable before anything in it is acknowledged.
      if (opened.created) await directory.sync();
      const reading = await readToLastWholeFrame(handle);
      spool = new Spool(
        file,
        directory,
        lock,
        handle,
        reading.goodBytes,
        reading.lastSeq + 1,
        options,
      );
      for (const { seq, offset, bytes } of reading.live.values())
        spool.placed(seq, { bytes, offset });
      await spool.tidy();
      if (spool.writer.failure) throw spool.writer.failure;
      if (reading.stoppedBecause !== undefined)
        options.onTornTail?.({
          file,
          keptEntries: reading.live.size,
          droppedBytes: reading.droppedBytes,
          reason: reading.stoppedBecause,
        });
      const recovered = [...reading.live.values()].map(({ seq, entry }) => ({ seq, entry }));
      return { spool, recovered };
    } catch (error) {
      // The spool, once made, owns the file, the lock and the directory (a rewrite may have
      // swapped the file already).
      if (spool) await spool.close().catch(() => undefined);
      else {
        await handle?.close().catch(() => undefined);
        await lock?.release();
        await directory.close().catch(() => undefined);
      }
      throw refusal(error, `open the spool in ${where}`);
    }
  }

  /** The bytes `entry` takes against maxBytes (its frame's size); a TypeError for meta with no JSON form. */
  static entryBytes(entry: SpoolEntry): number {
    return entryFrameBytes(entry);
  }

  get liveBytes(): number {
    return this.live;
  }

  get liveEntries(): number {
    return this.placements.size;
  }

  /** fdatasyncs made so far: far fewer than appends when they come together. */
  get syncCount(): number {
    return this.writer.syncCount;
  }

  /** Whether an entry of `bytes` (Spool.entryBytes) would be taken now. */
  wouldFit(bytes: number): boolean {
    return bytes <= MAX_FRAME_BYTES && this.live + bytes <= this.options.maxBytes;
  }

  /**
   * Resolves with the entry's seq once it is written and fdatasync'ed. Rejects with SpoolFull (nothing
   * written) when it does not fit, SpoolFailed when the write or fdatasync failed, SpoolClosed after
   * close(), and a TypeError when its meta has no JSON form.
   */
  async append(entry: SpoolEntry): Promise<number> {
    if (this.closing) throw new SpoolClosed(`the spool ${this.file} is closed`);
    if (this.writer.failure) throw this.writer.failure;
    const seq = this.nextSeq;
    const frame = encodeEntry(seq, entry);
    if (!this.wouldFit(frame.length))
      throw new SpoolFull(
        `an entry of ${frame.length} bytes does not fit in the spool ${this.file}: ` +
          `${this.live} of its ${this.options.maxBytes} bytes are live`,
      );
    this.nextSeq++;
    const placement: Placement = { bytes: frame.length, offset: undefined };
    this.placed(seq, placement);
    return new Promise<number>((resolve, reject) => {
      let settled = false;
      this.writer.add({
        frame,
        durable: true,
        written: (offset) => {
          placement.offset = offset;
          this.liveInFile += placement.bytes;
        },
        done: () => {
          settled = true;
          resolve(seq);
        },
        failed: (error) => {
          if (settled) return;
          settled = true;
          this.unplaced(seq);
          reject(error);
        },
      });
    });
  }

  /**
   * The entry is no longer needed. Unknown seqs (removed already, never appended) are ignored. The
   * removal is written in the background and never synced.
   */
  remove(seq: number): void {
    // A queued entry's seq is not out yet: its append has not resolved.
    if (this.placements.get(seq)?.offset === undefined) return;
    this.unplaced(seq);
    if (this.closing || this.writer.failure) return;
    this.writer.add({ frame: encodeRemoval(seq), durable: false });
  }

  /** Reads a live entry back from the file. */
  async read(seq: number): Promise<SpoolEntry> {
    if (this.closing) throw new SpoolClosed(`the spool ${this.file} is closed`);
    const placement = this.placements.get(seq);
    if (placement?.offset === undefined)
      throw new SpoolEntryUnknown(`the spool ${this.file} has no live entry ${seq}`);
    // Taken now: a rewrite may swap the file, but waits for this read before closing the old one.
    const reading = this.readEntry(this.writer.handle, seq, placement.offset, placement.bytes);
    this.reads.add(reading);
    try {
      return await reading;
    } finally {
      this.reads.delete(reading);
    }
  }

  /** Writes what is queued, then closes the file and releases the lock; idempotent. */
  close(): Promise<void> {
    return (this.closing ??= this.shutDown());
  }

  private async shutDown(): Promise<void> {
    await this.writer.idle();
    await Promise.allSettled(this.reads);
    try {
      await this.writer.handle.close();
    } finally {
      await this.lock.release();
      await this.directory.close();
    }
  }

  private placed(seq: number, placement: Placement): void {
    this.placements.set(seq, placement);
    this.live += placement.bytes;
    if (placement.offset !== undefined) this.liveInFile += placement.bytes;
  }

  private unplaced(seq: number): void {
    const placement = this.placements.get(seq);
    if (!placement) return;
    this.placements.delete(seq);
    this.live -= placement.bytes;
    if (placement.offset !== undefined) this.liveInFile -= placement.bytes;
  }

  private async readEntry(
    handle: FileHandle,
    seq: number,
    offset: number,
    bytes: number,
  ): Promise<SpoolEntry> {
    const frame = readFrame(await readAt(handle, offset, bytes), 0);
    if (frame.kind === 'entry' && frame.seq === seq && frame.bytes === bytes) return frame.entry;
    const found =
      frame.kind === 'invalid'
        ? frame.reason
        : frame.kind === 'incomplete'
          ? 'cut short'
          : frame.kind;
    throw new SpoolFailed(
      `entry ${seq} of the spool ${this.file} (byte ${offset}) no longer reads back: ${found}`,
    );
  }

  /**
   * Keeps the file small, between the writer's batches: empty once nothing is live (no sync: what
   * an unsynced cut leaves behind was removed), rewritten when dead frames dominate.
   */
  private async tidy(): Promise<void> {
    if (this.writer.failure) return;
    const fileBytes = this.writer.bytes;
    if (this.placements.size === 0 && this.reads.size === 0) return this.writer.empty();
    const minFileBytes = this.options.compactMinFileBytes ?? DEFAULT_COMPACT_MIN_FILE_BYTES;
    const dead = fileBytes - this.liveInFile;
    if (dead > this.liveInFile && fileBytes >= Math.max(minFileBytes, this.nextRewriteAt))
      await this.rewrite(minFileBytes);
  }

  private async rewrite(minFileBytes: number): Promise<void> {
    const frames = [...this.placements]
      .filter(([, placement]) => placement.offset !== undefined)
      .map(([seq, { offset, bytes }]) => ({ seq, offset: offset!, bytes }));
    const scratch = path.join(path.dirname(this.file), COMPACTING_FILE);
    const rewritten = await rewriteWith(this.writer.handle, frames, this.file, scratch).catch(
      () => {
        // The old file is whole and still the spool. Try again once it has grown by as much again.
        this.nextRewriteAt = this.writer.bytes + minFileBytes;
        return undefined;
      },
    );
    if (!rewritten) return;
    const old = this.writer.swap(rewritten.handle, rewritten.bytes);
    this.liveInFile = 0;
    for (const [seq, offset] of rewritten.offsets) {
      const placement = this.placements.get(seq);
      // Removed while it was copied: its bytes are dead in the new file too.
      if (!placement) continue;
      placement.offset = offset;
      this.liveInFile += placement.bytes;
    }
    try {
      // The rename must be durable before any append to the new file is acknowledged: a crash that
      // lost it would bring back the old file, without them.
      await this.directory.sync();
    } catch (error) {
      this.writer.fail('syncing the directory of', error);
    }
    await Promise.allSettled(this.reads);
    await old.close().catch(() => undefined);
  }
}

function checkOptions({ maxBytes, compactMinFileBytes }: SpoolOptions): void {
  if (!(Number.isSafeInteger(maxBytes) && maxBytes > 0))
    throw new SpoolRefused(`a spool's maxBytes must be a positive whole number, not ${maxBytes}`);
  if (compactMinFileBytes !== undefined && !(compactMinFileBytes >= 0))
    throw new SpoolRefused(`compactMinFileBytes must be 0 or more, not ${compactMinFileBytes}`);
}

/** What the file holds up to its last whole frame; what follows is cut off, durably. */
async function readToLastWholeFrame(
  handle: FileHandle,
): Promise<FileReading & { readonly droppedBytes: number }> {
  const size = (await handle.stat()).size;
  const reading = await readSpoolFile(handle, size);
  if (reading.stoppedBecause !== undefined) {
    await handle.truncate(reading.goodBytes);
    await handle.sync();
  }
  return { ...reading, droppedBytes: size - reading.goodBytes };
}
