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
}

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

/** A body read in chunks, joined only when someone asks for it whole. */
export class ChunkedBody implements DigestedBody {
  private joined: Buffer | undefined;

  constructor(
    private readonly chunks: Buffer[],
    private readonly total: number,
    readonly sha256: Buffer | undefined,
  ) {}

  body(): Buffer {
    const { chunks } = this;
    return (this.joined ??= chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, this.total));
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
    else done(read.length === 1 ? read[0]! : Buffer.concat(read, total));
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
