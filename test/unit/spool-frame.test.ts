// A spool frame reads back as written, and nothing else reads as a frame: every prefix of one is
// incomplete, every changed byte makes it invalid or incomplete, zeros and garbage are invalid.
import { crc32 } from 'node:zlib';
import {
  encodeEntry,
  encodeRemoval,
  entryFrameBytes,
  FRAME_HEADER_BYTES,
  readFrame,
  type SpoolEntry,
} from '../../src/store/spool/frame';

const entry: SpoolEntry = {
  meta: { status: 201, headers: [['content-type', 'application/json']], note: 'é✓' },
  blobs: [Buffer.from('{"id":1}'), Buffer.alloc(0), Buffer.from([0, 255, 7])],
};

test('an entry frame reads back as written, and is as long as entryFrameBytes says', () => {
  const frame = encodeEntry(2 ** 40 + 3, entry);
  expect(frame.length).toBe(entryFrameBytes(entry));
  expect(readFrame(frame, 0)).toEqual({
    kind: 'entry',
    seq: 2 ** 40 + 3,
    entry,
    bytes: frame.length,
  });
});

test('a removal frame reads back as written', () => {
  const frame = encodeRemoval(42);
  expect(readFrame(frame, 0)).toEqual({ kind: 'removal', seq: 42, bytes: frame.length });
});

test('frames read one after another from a shared buffer', () => {
  const frames = [
    encodeEntry(1, entry),
    encodeRemoval(1),
    encodeEntry(2, { meta: null, blobs: [] }),
  ];
  const buffer = Buffer.concat(frames);
  const kinds: string[] = [];
  for (let at = 0; at < buffer.length;) {
    const reading = readFrame(buffer, at);
    if (reading.kind === 'incomplete' || reading.kind === 'invalid') throw new Error(reading.kind);
    kinds.push(`${reading.kind} ${reading.seq}`);
    at += reading.bytes;
  }
  expect(kinds).toEqual(['entry 1', 'removal 1', 'entry 2']);
});

test('every prefix of a frame is incomplete, never a frame', () => {
  const frame = encodeEntry(7, entry);
  for (let length = 0; length < frame.length; length++)
    expect(readFrame(frame.subarray(0, length), 0).kind).toBe('incomplete');
});

test('a change to any one byte of a frame is caught', () => {
  const frame = encodeEntry(7, entry);
  for (let at = 0; at < frame.length; at++) {
    const changed = Buffer.from(frame);
    changed[at]! ^= 0x5a;
    expect(['invalid', 'incomplete']).toContain(readFrame(changed, 0).kind);
  }
});

test('zeros are not a frame, though a zero length has a zero CRC', () => {
  expect(crc32(Buffer.alloc(0))).toBe(0);
  expect(readFrame(Buffer.alloc(64), 0)).toEqual({
    kind: 'invalid',
    reason: 'impossible payload length 0',
  });
});

test('a payload with a matching CRC but lengths that do not add up is invalid', () => {
  /** A frame around `payload` with a correct header. */
  const framed = (payload: Buffer): Buffer => {
    const header = Buffer.alloc(FRAME_HEADER_BYTES);
    header.writeUInt32LE(payload.length, 0);
    header.writeUInt32LE(crc32(payload), 4);
    return Buffer.concat([header, payload]);
  };
  const good = encodeEntry(1, entry).subarray(FRAME_HEADER_BYTES);
  expect(readFrame(framed(Buffer.concat([good, Buffer.from([1])])), 0)).toEqual({
    kind: 'invalid',
    reason: "1 bytes after the entry's last blob",
  });
  expect(readFrame(framed(good.subarray(0, good.length - 1)), 0)).toMatchObject({
    kind: 'invalid',
    reason: 'entry blob 2 runs past the payload',
  });
  const unknownKind = Buffer.from(good);
  unknownKind[0] = 9;
  expect(readFrame(framed(unknownKind), 0)).toMatchObject({ reason: 'unknown frame kind 9' });
  const notJson = Buffer.from(good);
  notJson.write('#', 7 + 4);
  expect(readFrame(framed(notJson), 0)).toMatchObject({ reason: 'entry meta is not JSON' });
});

test('meta with no JSON form is refused with a TypeError', () => {
  expect(() => encodeEntry(1, { meta: undefined, blobs: [] })).toThrow(TypeError);
  expect(() => entryFrameBytes({ meta: () => 1, blobs: [] })).toThrow(TypeError);
});
