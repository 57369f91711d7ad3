// One record of the spool file as bytes, and the checks that tell a whole record from a torn one.
//
//   frame    [u32 payload bytes][u32 crc32 of the payload][payload]
//   payload  [u8 kind][u48 seq] then
//     entry    (kind 1)  [u32 meta bytes][meta as JSON, UTF-8][u32 blob count]([u32 blob bytes][blob])*
//     removal  (kind 2)  nothing more: the entry with that seq is no longer needed
//
// Little-endian, fixed widths, no padding. A frame is believed only when its length fits what was
// read, its CRC matches and its payload's own lengths add up exactly, so a tail cut mid-write, a run
// of zeros (a length of 0 has the CRC 0 too: a payload is never empty) or garbage never reads as one.
import { crc32 } from 'node:zlib';

/** What the spool keeps: JSON-serialisable meta (read back as JSON.parse gives it) and raw bytes. */
export interface SpoolEntry {
  readonly meta: unknown;
  readonly blobs: readonly Buffer[];
}

export const FRAME_HEADER_BYTES = 8;
/** The largest payload believed when reading: a garbage length must not make the reader allocate GiBs. */
export const MAX_PAYLOAD_BYTES = 2 ** 30;

const KIND_ENTRY = 1;
const KIND_REMOVAL = 2;
const SEQ_BYTES = 6;
const PAYLOAD_HEAD_BYTES = 1 + SEQ_BYTES;
const U32_BYTES = 4;

export type FrameReading =
  | {
      readonly kind: 'entry';
      readonly seq: number;
      readonly entry: SpoolEntry;
      readonly bytes: number;
    }
  | { readonly kind: 'removal'; readonly seq: number; readonly bytes: number }
  /** The frame at `at` needs `bytes` in all (header included), more than the buffer holds from there. */
  | { readonly kind: 'incomplete'; readonly bytes: number }
  | { readonly kind: 'invalid'; readonly reason: string };

/** The meta as it is stored; throws a TypeError when it has no JSON form. */
function metaJson(meta: unknown): string {
  const json = JSON.stringify(meta) as string | undefined;
  if (json === undefined) throw new TypeError(`spool entry meta has no JSON form (${typeof meta})`);
  return json;
}

/** The bytes an entry takes in the file, frame header included: what counts against maxBytes. */
export function entryFrameBytes(entry: SpoolEntry): number {
  return encodedEntryBytes(Buffer.byteLength(metaJson(entry.meta)), entry.blobs);
}

function encodedEntryBytes(metaBytes: number, blobs: readonly Buffer[]): number {
  let bytes = FRAME_HEADER_BYTES + PAYLOAD_HEAD_BYTES + U32_BYTES + metaBytes + U32_BYTES;
  for (const blob of blobs) bytes += U32_BYTES + blob.length;
  return bytes;
}

export function encodeEntry(seq: number, entry: SpoolEntry): Buffer {
  const meta = Buffer.from(metaJson(entry.meta));
  const frame = Buffer.allocUnsafe(encodedEntryBytes(meta.length, entry.blobs));
  let at = FRAME_HEADER_BYTES;
  at = frame.writeUInt8(KIND_ENTRY, at);
  at = frame.writeUIntLE(seq, at, SEQ_BYTES);
  at = frame.writeUInt32LE(meta.length, at);
  at += meta.copy(frame, at);
  at = frame.writeUInt32LE(entry.blobs.length, at);
  for (const blob of entry.blobs) {
    at = frame.writeUInt32LE(blob.length, at);
    at += blob.copy(frame, at);
  }
  return sealed(frame);
}

export function encodeRemoval(seq: number): Buffer {
  const frame = Buffer.allocUnsafe(FRAME_HEADER_BYTES + PAYLOAD_HEAD_BYTES);
  frame.writeUIntLE(seq, frame.writeUInt8(KIND_REMOVAL, FRAME_HEADER_BYTES), SEQ_BYTES);
  return sealed(frame);
}

/** Fills in the header of a frame whose payload is written. */
function sealed(frame: Buffer): Buffer {
  const payload = frame.subarray(FRAME_HEADER_BYTES);
  frame.writeUInt32LE(payload.length, 0);
  frame.writeUInt32LE(crc32(payload), U32_BYTES);
  return frame;
}

/** Reads the frame starting at `at`. Blobs are views into `buffer`: copy them to keep them. */
export function readFrame(buffer: Buffer, at: number): FrameReading {
  if (buffer.length - at < FRAME_HEADER_BYTES)
    return { kind: 'incomplete', bytes: FRAME_HEADER_BYTES };
  const length = buffer.readUInt32LE(at);
  if (length < PAYLOAD_HEAD_BYTES || length > MAX_PAYLOAD_BYTES)
    return { kind: 'invalid', reason: `impossible payload length ${length}` };
  const bytes = FRAME_HEADER_BYTES + length;
  if (buffer.length - at < bytes) return { kind: 'incomplete', bytes };
  const payload = buffer.subarray(at + FRAME_HEADER_BYTES, at + bytes);
  if (crc32(payload) !== buffer.readUInt32LE(at + U32_BYTES))
    return { kind: 'invalid', reason: 'checksum mismatch' };
  const kind = payload.readUInt8(0);
  const seq = payload.readUIntLE(1, SEQ_BYTES);
  if (kind === KIND_REMOVAL)
    return length === PAYLOAD_HEAD_BYTES
      ? { kind: 'removal', seq, bytes }
      : { kind: 'invalid', reason: `removal payload of ${length} bytes` };
  if (kind !== KIND_ENTRY) return { kind: 'invalid', reason: `unknown frame kind ${kind}` };
  const entry = readEntryPayload(payload);
  return typeof entry === 'string'
    ? { kind: 'invalid', reason: entry }
    : { kind: 'entry', seq, entry, bytes };
}

/** The entry in a payload whose CRC matched, or why its lengths do not add up. */
function readEntryPayload(payload: Buffer): SpoolEntry | string {
  let at = PAYLOAD_HEAD_BYTES;
  const take = (bytes: number): Buffer | undefined => {
    if (payload.length - at < bytes) return undefined;
    at += bytes;
    return payload.subarray(at - bytes, at);
  };
  const u32 = (): number | undefined => take(U32_BYTES)?.readUInt32LE(0);
  const metaLength = u32();
  const metaBytes = metaLength === undefined ? undefined : take(metaLength);
  if (metaBytes === undefined) return 'entry meta runs past the payload';
  let meta: unknown;
  try {
    meta = JSON.parse(metaBytes.toString('utf8'));
  } catch {
    return 'entry meta is not JSON';
  }
  const count = u32();
  if (count === undefined) return 'entry blob count runs past the payload';
  const blobs: Buffer[] = [];
  for (let i = 0; i < count; i++) {
    const blobLength = u32();
    const blob = blobLength === undefined ? undefined : take(blobLength);
    if (blob === undefined) return `entry blob ${i} runs past the payload`;
    blobs.push(blob);
  }
  if (at !== payload.length) return `${payload.length - at} bytes after the entry's last blob`;
  return { meta, blobs };
}
