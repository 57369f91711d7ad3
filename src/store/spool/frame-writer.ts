// Writes frames at the end of the spool file, one batch at a time (group commit): every frame
// queued while a batch is written and fdatasync'ed goes out in the next batch, with one write and,
// if any of them must be durable, one fdatasync. An outage that queues hundreds of appends costs a
// few fdatasyncs, not hundreds; frames queued in one turn of the event loop share the first.
//
//   queue ─► batch: one write at the file's end ─► fdatasync (if a frame is durable) ─► done
//                        │ fails: cut back to where the batch began, its frames failed
//                        └ fdatasync fails: broken, every later frame failed too
//
// Between batches, with nothing being written, the owner may empty the file or swap it for a
// rewritten one (`between`).
import type { FileHandle } from 'node:fs/promises';
import { messageOf, SpoolFailed } from './errors';
import { writeAt } from './file-io';

export interface FrameWrite {
  readonly frame: Buffer;
  /** Whether it waits for an fdatasync before `done` (a removal does not). */
  readonly durable: boolean;
  /** Once written, before any fdatasync: where the frame starts. */
  written?(offset: number): void;
  /** Once written (and fdatasync'ed, if durable). */
  done?(): void;
  /** When it could not be written, or made durable. */
  failed?(error: SpoolFailed): void;
}

export class FrameWriter {
  private queue: FrameWrite[] = [];
  private writing: Promise<void> | undefined;
  private syncs = 0;
  private broken: SpoolFailed | undefined;

  constructor(
    private readonly file: string,
    private current: FileHandle,
    /** The file's size: where the next batch goes. */
    private size: number,
    /** Runs after each batch, before the next one starts. */
    private readonly between: () => Promise<void>,
  ) {}

  get handle(): FileHandle {
    return this.current;
  }

  get bytes(): number {
    return this.size;
  }

  /** fdatasyncs made so far. */
  get syncCount(): number {
    return this.syncs;
  }

  /** Set once the writer is broken (a failed fdatasync): it writes nothing more. */
  get failure(): SpoolFailed | undefined {
    return this.broken;
  }

  add(write: FrameWrite): void {
    this.queue.push(write);
    this.start();
  }

  /** Resolves once nothing is queued or being written. */
  async idle(): Promise<void> {
    while (this.writing) await this.writing;
  }

  /** Between batches only: empties the file. */
  async empty(): Promise<void> {
    if (this.size === 0) return;
    try {
      await this.current.truncate(0);
      this.size = 0;
    } catch (error) {
      this.fail('emptying', error);
    }
  }

  /** Between batches only: writes go to `handle` from now on; returns the old one. */
  swap(handle: FileHandle, size: number): FileHandle {
    const old = this.current;
    this.current = handle;
    this.size = size;
    return old;
  }

  /**
   * From now on nothing is written: after a failed fdatasync the kernel may have dropped the
   * unsynced pages, and a second fdatasync can succeed without them (PostgreSQL's "fsyncgate").
   */
  fail(doing: string, error: unknown): SpoolFailed {
    this.broken ??= new SpoolFailed(
      `${doing} the spool ${this.file} failed (${messageOf(error)}); what it holds on disk is ` +
        `unknown, so it takes no more appends until it is opened again`,
      error,
    );
    return this.broken;
  }

  private start(): void {
    this.writing ??= this.writeQueued().finally(() => {
      this.writing = undefined;
      if (this.queue.length > 0) this.start();
    });
  }

  private async writeQueued(): Promise<void> {
    // Lets every frame queued in this turn of the event loop join the first batch.
    await Promise.resolve();
    while (this.queue.length > 0) {
      const batch = this.queue;
      this.queue = [];
      try {
        await this.writeBatch(batch);
      } catch (error) {
        // Not expected (each step handles its own failures), but no write is left hanging.
        failAll(batch, this.fail('writing', error));
      }
      await this.between().catch((error: unknown) => this.fail('tidying', error));
    }
  }

  private async writeBatch(batch: FrameWrite[]): Promise<void> {
    if (this.broken) return failAll(batch, this.broken);
    const start = this.size;
    const bytes = Buffer.concat(batch.map((write) => write.frame));
    try {
      await writeAt(this.current, bytes, start);
    } catch (error) {
      // A partial write leaves a torn frame, and reading stops at one: every frame written after
      // it would be lost at the next open. Cut it off; if that fails too, write nothing more.
      await this.current
        .truncate(start)
        .catch((cutError: unknown) => this.fail('cutting', cutError));
      const failed = new SpoolFailed(
        `writing to the spool ${this.file} failed: ${messageOf(error)}`,
        error,
      );
      return failAll(batch, failed);
    }
    this.size = start + bytes.length;
    let offset = start;
    for (const write of batch) {
      write.written?.(offset);
      offset += write.frame.length;
    }
    if (batch.some((write) => write.durable)) {
      try {
        await this.current.datasync();
        this.syncs++;
      } catch (error) {
        return failAll(batch, this.fail('fdatasync of', error));
      }
    }
    for (const write of batch) write.done?.();
  }
}

function failAll(batch: FrameWrite[], error: SpoolFailed): void {
  for (const write of batch) write.failed?.(error);
}
