// Reads and writes at a position, whole: a FileHandle's read() and write() may move fewer bytes
// than asked, and a spool frame is only good whole.
import type { FileHandle } from 'node:fs/promises';

/** `bytes` from `position`, fewer only where the file ends first. */
export async function readAt(handle: FileHandle, position: number, bytes: number): Promise<Buffer> {
  const buffer = Buffer.allocUnsafe(bytes);
  let filled = 0;
  while (filled < bytes) {
    const { bytesRead } = await handle.read(buffer, filled, bytes - filled, position + filled);
    if (bytesRead === 0) break;
    filled += bytesRead;
  }
  return buffer.subarray(0, filled);
}

/** All of `buffer` at `position`; throws if a write fails (some of it may be written by then). */
export async function writeAt(handle: FileHandle, buffer: Buffer, position: number): Promise<void> {
  let written = 0;
  while (written < buffer.length) {
    const { bytesWritten } = await handle.write(
      buffer,
      written,
      buffer.length - written,
      position + written,
    );
    if (bytesWritten === 0) throw new Error(`a write at byte ${position + written} wrote nothing`);
    written += bytesWritten;
  }
}
