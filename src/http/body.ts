// Reads a request body into memory with a hard size limit, so an oversized body is refused (413)
// before it costs more than the limit, whether it announces its length or is chunked.
import type { IncomingMessage } from 'node:http';

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
}

export function readBody(
  req: IncomingMessage,
  limitBytes: number,
  options: ReadBodyOptions = {},
): Promise<Buffer> {
  const declared = req.headers['content-length'];
  if (declared !== undefined && Number(declared) > limitBytes) {
    return Promise.reject(new BodyTooLargeError(limitBytes));
  }
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let total = 0;
    const onData = (chunk: Buffer): void => {
      chunks.push(chunk);
      total += chunk.length;
      if (total <= limitBytes) return;
      cleanup();
      if (options.rewindOnOverflow) {
        // Stop the flow before anyone could miss data, then hand the bytes back for the pipe.
        req.pause();
        req.unshift(Buffer.concat(chunks, total));
      }
      reject(new BodyTooLargeError(limitBytes));
    };
    const onEnd = (): void => {
      cleanup();
      resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, total));
    };
    const onError = (error: Error): void => {
      cleanup();
      reject(error);
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
  });
}
