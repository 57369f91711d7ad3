// Reads a request body into memory with a hard size limit, so an oversized body is refused (413)
// before it costs more than the limit, whether it announces its length or is chunked.
import { createHash, type Hash } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { contentLengthOf, headerLines } from './header-lines';

const EMPTY = Buffer.alloc(0);

export class BodyTooLargeError extends Error {
  constructor(readonly limitBytes: number) {
    super(`request body exceeds ${limitBytes} bytes`);
  }
}

export interface ReadBodyOptions {
  /**
   * On overflow, put what was read back on the stream (`unshift`) before rejecting, so the request can
   * still be streamed upstream whole (shadow mode). Otherwise the bytes are dropped.
   */
  readonly rewindOnOverflow?: boolean;
  /**
   * The Content-Length line as sent, from a caller that has read the headers already
   * (header-lines.ts): the raw lines are not scanned again. Absent or undefined: scanned here.
   */
  readonly contentLength?: string | undefined;
}

export interface DigestedBody {
  /** The whole body, joined on first use (a repeat answered from its digest never needs it). */
  body(): Buffer;
  /** SHA-256 of the body, for bodies of at least `digestFromBytes`; undefined for smaller ones. */
  readonly sha256: Buffer | undefined;
  /**
   * Frees the chunks of a body nobody asked for whole, now: its request was answered without it (a
   * replay by its digest). body() throws after this; once body() was called, it does nothing.
   */
  release(): void;
}

/**
 * Frees the memory of body chunks that will not be read again, at once. Node gives every chunk it
 * reads its own ArrayBuffer, and the collector frees those only when it gets to them: twenty
 * repeats of a megabyte at a time left 150–200 MB of read chunks waiting for it (the big-body
 * bench). A chunk is freed only when it is the whole of its ArrayBuffer, so no other view can be
 * left reading freed memory (detached, such a buffer reads as empty, it never reads freed bytes).
 */
function freeChunks(chunks: readonly Buffer[]): void {
  for (const chunk of chunks) {
    const buffer = chunk.buffer as Detachable;
    if (chunk.byteOffset === 0 && chunk.byteLength === buffer.byteLength) buffer.transfer(0);
  }
}

/** ArrayBuffer.prototype.transfer (ES2024, in every Node the project supports): detaches this one. */
type Detachable = ArrayBufferLike & { transfer(newByteLength: number): ArrayBuffer };

/**
 * Reads the body as readBody does and, once it reaches `digestFromBytes`, hashes it chunk by chunk
 * as it arrives: a megabyte hashed (or joined) in one go at the end blocks the event loop for
 * milliseconds, 64 KiB at a time it never does.
 *
 * And one chunk per turn of the event loop: libuv reads a readable socket up to 32 times in a row,
 * so twenty large uploads arriving at once were hashed megabytes at a time in one turn, and an
 * unrelated request waited 50–140 ms behind them (the big-body bench). Paused after each hashed
 * chunk and resumed on the next turn, each upload takes its share and the rest get theirs.
 */
export function readDigestedBody(
  req: IncomingMessage,
  limitBytes: number,
  digestFromBytes: number,
): Promise<DigestedBody> {
  return new Promise((resolve, reject) =>
    readDigestedBodyThen(req, limitBytes, digestFromBytes, undefined, resolve, reject),
  );
}

/**
 * readDigestedBody without a promise; `contentLength` is the Content-Length line when the caller
 * has read it (undefined: read here). `done` runs in the body's own last event, so a caller that
 * can answer from memory answers in that same turn (pipeline.ts, the quick replay).
 */
export function readDigestedBodyThen(
  req: IncomingMessage,
  limitBytes: number,
  digestFromBytes: number,
  contentLength: string | undefined,
  done: (body: DigestedBody) => void,
  failed: (error: unknown) => void,
): void {
  let hash: Hash | undefined;
  const chunks: Buffer[] = [];
  let total = 0;
  const resume = (): void => void req.resume();
  const onChunk = (chunk: Buffer): void => {
    total += chunk.length;
    if (hash) hash.update(chunk);
    else if (total < digestFromBytes) return;
    else {
      hash = createHash('sha256');
      for (const earlier of chunks) hash.update(earlier);
    }
    req.pause();
    setImmediate(resume);
  };
  collectBody(
    req,
    limitBytes,
    { contentLength, keepChunks: chunks, onChunk },
    () => done(new ChunkedBody(chunks, total, hash?.digest())),
    failed,
  );
}

/**
 * A body read in chunks, joined only when someone asks for it whole. Joined, or released unjoined,
 * it frees its chunks at once: they are its own (Node's reads, hashed as they came), and a large
 * body's chunks would otherwise wait for the collector.
 */
export class ChunkedBody implements DigestedBody {
  private joined: Buffer | undefined;

  constructor(
    /** Undefined once freed: joined (then `joined` holds the body) or released unjoined. */
    private chunks: Buffer[] | undefined,
    private readonly total: number,
    readonly sha256: Buffer | undefined,
  ) {}

  body(): Buffer {
    if (this.joined !== undefined) return this.joined;
    const { chunks } = this;
    if (chunks === undefined)
      throw new Error('the request body was released: nothing may read it now');
    if (chunks.length === 1) return (this.joined = chunks[0]!);
    this.joined = Buffer.concat(chunks, this.total);
    this.letGo(chunks);
    return this.joined;
  }

  release(): void {
    if (this.joined === undefined && this.chunks !== undefined) this.letGo(this.chunks);
  }

  private letGo(chunks: Buffer[]): void {
    freeChunks(chunks);
    this.chunks = undefined;
  }
}

interface CollectOptions extends ReadBodyOptions {
  readonly onChunk?: (chunk: Buffer) => void;
  /** Collect the chunks here and end with an empty buffer: the caller joins them when needed. */
  readonly keepChunks?: Buffer[];
}

export function readBody(
  req: IncomingMessage,
  limitBytes: number,
  options: ReadBodyOptions = {},
): Promise<Buffer> {
  return new Promise((resolve, reject) => collectBody(req, limitBytes, options, resolve, reject));
}

/** Reads the body with its limit; exactly one of `done` and `failed` is called, once. */
function collectBody(
  req: IncomingMessage,
  limitBytes: number,
  options: CollectOptions,
  done: (body: Buffer) => void,
  failed: (error: unknown) => void,
): void {
  // From the raw lines: reading req.headers would have Node build it (header-lines.ts).
  const declared = options.contentLength ?? headerLines(req.rawHeaders, 'content-length')?.[0];
  if (declared !== undefined && contentLengthOf(declared) > limitBytes) {
    failed(new BodyTooLargeError(limitBytes));
    return;
  }
  let chunks: Buffer[] = options.keepChunks ?? [];
  let total = 0;
  let ended = false;
  const onData = (chunk: Buffer): void => {
    chunks.push(chunk);
    total += chunk.length;
    if (total <= limitBytes) {
      options.onChunk?.(chunk);
      return;
    }
    cleanup();
    if (options.rewindOnOverflow) {
      // Stop the flow before anyone could miss data, then hand the bytes back for the pipe.
      req.pause();
      req.unshift(Buffer.concat(chunks, total));
    }
    freeChunks(chunks);
    failed(new BodyTooLargeError(limitBytes));
  };
  // Nothing comes after 'end' but a late error or abort, which the body no longer cares about: the
  // listeners stay on the request, which ends with its response, instead of being taken off one by
  // one (four removals were ~3k instructions of a cached replay's ~125k, callgrind). The list is let
  // go of here, so a body joined from several chunks is not also kept in pieces by the listeners.
  const onEnd = (): void => {
    ended = true;
    const read = chunks;
    chunks = [];
    if (options.keepChunks) done(EMPTY);
    else if (read.length === 1) done(read[0]!);
    else {
      const joined = Buffer.concat(read, total);
      freeChunks(read);
      done(joined);
    }
  };
  const onError = (error: Error): void => {
    if (ended) return;
    cleanup();
    failed(error);
  };
  const onAborted = (): void =>
    onError(new Error('client closed the connection before sending the whole body'));
  const cleanup = (): void => {
    req.off('data', onData);
    req.off('end', onEnd);
    req.off('error', onError);
    req.off('aborted', onAborted);
  };
  req.on('data', onData);
  req.on('end', onEnd);
  req.on('error', onError);
  req.on('aborted', onAborted);
}
