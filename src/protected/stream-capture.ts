// What the proxy keeps of an answer as it arrives, to store it once whole: every chunk up to
// maxResponseBytes. Past that the answer is delivered but not stored (Idempotent-Body-Omitted); its
// first maxResponseBytes stay, in case it breaks off (the operator's partial answer, record.ts),
// and the rest is not kept, so an endless stream costs no more memory than the limit.
import type { Capture } from '../store/live-answer';

const EMPTY = Buffer.alloc(0);

export class StreamCapture implements Capture {
  chunks: Buffer[] = [];
  /** Bytes seen, kept or not. */
  total = 0;
  whole = true;
  /** The chunks kept before the answer outgrew the limit, for the one call that reads them. */
  private dropped: Buffer[] = [];
  /** Once the answer outgrew the limit: its first maxBytes bytes. */
  private firstChunks: Buffer[] = [];

  constructor(private readonly maxBytes: number) {}

  /** Adds a chunk; false once the answer is larger than the limit (and no longer kept). */
  add(chunk: Buffer): boolean {
    this.total += chunk.length;
    if (!this.whole) return false;
    if (this.total <= this.maxBytes) {
      this.chunks.push(chunk);
      return true;
    }
    this.whole = false;
    this.dropped = this.chunks;
    this.firstChunks = [
      ...this.chunks,
      chunk.subarray(0, this.maxBytes - (this.total - chunk.length)),
    ];
    this.chunks = [];
    return false;
  }

  /**
   * The chunks kept before the one that outgrew the limit, handed over once (to be written by a
   * receiver that kept the answer whole until then), and let go of here. Empty afterwards.
   */
  takeOverflowed(): Buffer[] {
    const kept = this.dropped;
    this.dropped = [];
    return kept;
  }

  /** The whole answer, or an empty body once it outgrew the limit. */
  body(): Buffer {
    if (!this.whole) return EMPTY;
    return this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks, this.total);
  }

  /** What arrived so far, cut at the limit: the whole of it while `whole`. */
  prefix(): Buffer {
    return this.whole ? this.body() : Buffer.concat(this.firstChunks);
  }
}
