// A large body is hashed as it arrives, one chunk per turn of the event loop, so twenty big uploads
// at once cannot hold everyone else up; and what is read is still exactly what was sent.
import { createHash } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { PassThrough } from 'node:stream';
import fc from 'fast-check';
import {
  BodyTooLargeError,
  readBody,
  readDigestedBody,
  readDigestedBodyThen,
} from '../../src/http/body';

const CHUNK = 64 * 1024;

/** A request whose whole body is already buffered, as after a burst of socket reads. */
function bufferedRequest(chunks: Buffer[], declareLength = true): IncomingMessage {
  const stream = new PassThrough({ highWaterMark: 1 });
  const total = chunks.reduce((n, c) => n + c.length, 0);
  for (const chunk of chunks) stream.write(chunk);
  stream.end();
  return Object.assign(stream, {
    rawHeaders: declareLength ? ['Content-Length', String(total)] : [],
  }) as unknown as IncomingMessage;
}

const chunksOf = (count: number): Buffer[] =>
  Array.from({ length: count }, (_, n) => Buffer.alloc(CHUNK, n));

test('a large body is read one hashed chunk per turn: other work runs in between', async () => {
  const chunks = chunksOf(16);
  const req = bufferedRequest(chunks);
  let readWhenOtherRan = -1;
  let read = 0;
  req.on('data', () => read++);
  const reading = readDigestedBody(req, 10 * 1024 * 1024, CHUNK);
  setImmediate(() => (readWhenOtherRan = read));
  const body = await reading;
  expect(read).toBe(16);
  // Without the pause every buffered chunk would be emitted (and hashed) before the next turn.
  expect(readWhenOtherRan).toBeGreaterThanOrEqual(1);
  expect(readWhenOtherRan).toBeLessThanOrEqual(2);
  const whole = Buffer.concat(chunks);
  expect(body.body().equals(whole)).toBe(true);
  expect(body.sha256).toEqual(createHash('sha256').update(whole).digest());
});

test('a small body is read in one go, unhashed', async () => {
  const chunks = [Buffer.from('{"a":'), Buffer.from('1}')];
  const body = await readDigestedBody(bufferedRequest(chunks), 1024, CHUNK);
  expect(body.body().toString()).toBe('{"a":1}');
  expect(body.sha256).toBeUndefined();
});

test('a body past the limit is still refused while chunks are paced', async () => {
  const req = bufferedRequest(chunksOf(8), false);
  await expect(readDigestedBody(req, 4 * CHUNK + 1, CHUNK)).rejects.toBeInstanceOf(
    BodyTooLargeError,
  );
});

test('a Content-Length the caller read is the one checked: an announced overflow is refused unread', async () => {
  // The lines say 7 bytes; the caller's reading says 5000, past the limit: it is what counts.
  const req = bufferedRequest([Buffer.from('{"a":1}')]);
  const failed = await new Promise<unknown>((resolve) =>
    readDigestedBodyThen(req, 1024, CHUNK, '5000', () => resolve(undefined), resolve),
  );
  expect(failed).toBeInstanceOf(BodyTooLargeError);
  // Refused before a byte was taken: the body is still on the stream.
  expect(req.readableLength).toBe(7);
  const read = await new Promise<string>((resolve, reject) =>
    readDigestedBodyThen(req, 1024, CHUNK, '7', (body) => resolve(body.body().toString()), reject),
  );
  expect(read).toBe('{"a":1}');
});

test('property: whatever the chunking and threshold, the body and digest are exactly what was sent', async () => {
  await fc.assert(
    fc.asyncProperty(
      fc.array(fc.uint8Array({ minLength: 1, maxLength: 40_000 }), { minLength: 1, maxLength: 12 }),
      fc.integer({ min: 1, max: 100_000 }),
      fc.boolean(),
      async (parts, digestFrom, declareLength) => {
        const chunks = parts.map((part) => Buffer.from(part));
        const whole = Buffer.concat(chunks);
        const read = await readDigestedBody(
          bufferedRequest(chunks, declareLength),
          10 * 1024 * 1024,
          digestFrom,
        );
        if (whole.length < digestFrom) {
          expect(read.sha256).toBeUndefined();
        } else {
          expect(read.sha256).toEqual(createHash('sha256').update(whole).digest());
        }
        expect(read.body().equals(whole)).toBe(true);
      },
    ),
    { numRuns: 200 },
  );
});

/** True when `chunk`'s memory was given back: its ArrayBuffer is detached and reads as empty. */
const freed = (chunk: Buffer): boolean => chunk.buffer.byteLength === 0 && chunk.length === 0;

describe('the memory of a large body is given back as soon as nothing will read it', () => {
  test('joined, its chunks are freed: the joined copy is what is left', async () => {
    const chunks = chunksOf(16);
    const whole = Buffer.concat(chunks);
    const read = await readDigestedBody(bufferedRequest(chunks), 10 * 1024 * 1024, CHUNK);
    expect(chunks.some(freed)).toBe(false);
    const body = read.body();
    expect(body.equals(whole)).toBe(true);
    expect(chunks.every(freed)).toBe(true);
    expect(read.body()).toBe(body);
    read.release(); // the joined body is someone's now: left alone
    expect(read.body().equals(whole)).toBe(true);
  });

  test('released unjoined (answered by its digest), its chunks are freed and it cannot be read', async () => {
    const chunks = chunksOf(4);
    const digest = createHash('sha256').update(Buffer.concat(chunks)).digest();
    const read = await readDigestedBody(bufferedRequest(chunks), 10 * 1024 * 1024, CHUNK);
    read.release();
    expect(chunks.every(freed)).toBe(true);
    expect(read.sha256).toEqual(digest);
    expect(() => read.body()).toThrow('the request body was released');
    read.release(); // twice is once
  });

  test('a body of one chunk is that chunk, never freed', async () => {
    const [chunk] = chunksOf(1);
    const read = await readDigestedBody(bufferedRequest([chunk!]), 10 * 1024 * 1024, CHUNK);
    expect(read.body()).toBe(chunk);
    read.release();
    expect(freed(chunk!)).toBe(false);
    expect(read.body()).toBe(chunk);
  });

  test('a chunk that shares its ArrayBuffer with other views is not freed', async () => {
    const shared = Buffer.alloc(4 * CHUNK, 7);
    const chunks = [0, 1, 2, 3].map((n) => shared.subarray(n * CHUNK, (n + 1) * CHUNK));
    const read = await readDigestedBody(bufferedRequest(chunks), 10 * 1024 * 1024, CHUNK);
    expect(read.body().equals(Buffer.alloc(4 * CHUNK, 7))).toBe(true);
    read.release();
    expect(shared.equals(Buffer.alloc(4 * CHUNK, 7))).toBe(true);
    expect(chunks.some(freed)).toBe(false);
  });

  test('a body read whole frees the chunks it was joined from', async () => {
    const chunks = chunksOf(3);
    const whole = Buffer.concat(chunks);
    const body = await readBody(bufferedRequest(chunks), 10 * 1024 * 1024);
    expect(body.equals(whole)).toBe(true);
    expect(chunks.every(freed)).toBe(true);
  });

  test('a body past the limit frees what it read, and a rewound one still streams whole', async () => {
    const dropped = chunksOf(4);
    await expect(readBody(bufferedRequest(dropped, false), 2 * CHUNK)).rejects.toBeInstanceOf(
      BodyTooLargeError,
    );
    expect(dropped.slice(0, 3).every(freed)).toBe(true);
    const rewound = chunksOf(4);
    const whole = Buffer.concat(rewound);
    const req = bufferedRequest(rewound, false);
    await expect(readBody(req, 2 * CHUNK, { rewindOnOverflow: true })).rejects.toBeInstanceOf(
      BodyTooLargeError,
    );
    const rest: Buffer[] = [];
    req.on('data', (chunk: Buffer) => rest.push(chunk));
    req.resume();
    await new Promise((resolve) => req.on('end', resolve));
    expect(Buffer.concat(rest).equals(whole)).toBe(true);
  });
});

/** Reads with readDigestedBodyThen, counting what it reports. */
function counted(req: IncomingMessage): { done: number; failed: unknown[]; ended: Promise<void> } {
  const seen = { done: 0, failed: [] as unknown[], ended: Promise.resolve() };
  seen.ended = new Promise((resolve) =>
    readDigestedBodyThen(
      req,
      1024,
      CHUNK,
      undefined,
      () => {
        seen.done++;
        resolve();
      },
      (error) => {
        seen.failed.push(error);
        resolve();
      },
    ),
  );
  return seen;
}

test('an error or an abort after the body ended is ignored: the read stays one success', async () => {
  const req = bufferedRequest([Buffer.from('{"a":1}')]);
  const seen = counted(req);
  await seen.ended;
  // The listeners stay after the end; what they hear now is no failure of the read, and an
  // 'error' with a listener cannot crash the process either.
  expect(req.listenerCount('error')).toBeGreaterThan(0);
  req.emit('error', new Error('the socket reset after the body was read'));
  req.emit('aborted');
  await new Promise((resolve) => setImmediate(resolve));
  expect(seen.done).toBe(1);
  expect(seen.failed).toEqual([]);
});

test('an error before the end fails the read once and takes the listeners off', async () => {
  const stream = new PassThrough();
  const req = Object.assign(stream, { rawHeaders: [] }) as unknown as IncomingMessage;
  const before = { data: req.listenerCount('data'), error: req.listenerCount('error') };
  stream.write(Buffer.from('{"a":'));
  const seen = counted(req);
  req.emit('error', new Error('client went away'));
  await seen.ended;
  expect(seen.done).toBe(0);
  expect(seen.failed).toHaveLength(1);
  expect(req.listenerCount('data')).toBe(before.data);
  expect(req.listenerCount('error')).toBe(before.error);
});
