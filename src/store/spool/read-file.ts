// Reads a spool file from its first byte to its last whole frame: the entries still live (appended
// and not removed), in append order, and where the good frames end. Reading stops at the first frame
// that is not whole (a crash mid-append), fails its checks, or goes back in seq (see below); what
// follows it is never believed, since frames have no marker to resynchronise on and garbage can
// look like a length.
import type { FileHandle } from 'node:fs/promises';
import { readAt } from './file-io';
import { readFrame, type SpoolEntry } from './frame';

/** Read at least this much at a time: one syscall for many small frames. */
const CHUNK_BYTES = 1 << 20;

export interface LiveEntry {
  readonly seq: number;
  /** Where its frame starts in the file, and the frame's size. */
  readonly offset: number;
  readonly bytes: number;
  readonly entry: SpoolEntry;
}

export interface FileReading {
  /** Keyed by seq, in append order. */
  readonly live: Map<number, LiveEntry>;
  /** Where the last good frame ends: what lies beyond is to be cut off. */
  readonly goodBytes: number;
  /** The highest seq in the good frames, 0 when none. */
  readonly lastSeq: number;
  /** Why reading stopped before the end of the file, when it did. */
  readonly stoppedBecause?: string;
}

export async function readSpoolFile(handle: FileHandle, fileBytes: number): Promise<FileReading> {
  const live = new Map<number, LiveEntry>();
  let lastSeq = 0;
  let chunk: Buffer = Buffer.alloc(0);
  let chunkStart = 0;
  let at = 0;
  const stop = (why: string): FileReading => ({
    live,
    goodBytes: at,
    lastSeq,
    stoppedBecause: `frame at byte ${at}: ${why}`,
  });
  while (at < fileBytes) {
    const reading = readFrame(chunk, at - chunkStart);
    if (reading.kind === 'incomplete') {
      if (at + reading.bytes > fileBytes)
        return stop(`cut short: it needs ${reading.bytes} bytes, the file has ${fileBytes - at}`);
      const wanted = Math.min(Math.max(CHUNK_BYTES, reading.bytes), fileBytes - at);
      chunk = await readAt(handle, at, wanted);
      chunkStart = at;
      if (chunk.length < wanted) return stop('the file ended before the size it had when opened');
      continue;
    }
    if (reading.kind === 'invalid') return stop(reading.reason);
    if (reading.kind === 'entry') {
      // Seqs only grow, compaction keeps their order, so one going back is not this file's frame:
      // a stale one that an unsynced truncation left behind a newer write.
      if (reading.seq <= lastSeq) return stop(`seq ${reading.seq} after seq ${lastSeq}`);
      lastSeq = reading.seq;
      const { meta, blobs } = reading.entry;
      // Copied: a view would keep the whole chunk alive for as long as the entry.
      const entry = { meta, blobs: blobs.map((blob) => Buffer.from(blob)) };
      live.set(reading.seq, { seq: reading.seq, offset: at, bytes: reading.bytes, entry });
    } else {
      live.delete(reading.seq);
    }
    at += reading.bytes;
  }
  return { live, goodBytes: at, lastSeq };
}
