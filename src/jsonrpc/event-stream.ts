// Splits a text/event-stream into whole events as its bytes arrive (the WHATWG HTML "server-sent
// events" grammar: lines end in CRLF, LF or CR; a blank line ends an event; `data:` lines join with
// LF). The proxy needs the data of each event, to find the tool's final response, and the event's
// exact bytes, to pass every event through unchanged.

const LF = 0x0a;
const CR = 0x0d;
const EMPTY = Buffer.alloc(0);
const DATA_FIELD = Buffer.from('data');

export interface SseEvent {
  /** The event's bytes as they arrived, its closing blank line included. */
  readonly bytes: Buffer;
  /** Its `data` lines joined with LF, or undefined when it had none (a comment, a keep-alive). */
  readonly data: string | undefined;
}

export class SseReader {
  /** Bytes of the event not yet complete. */
  private pending: Buffer = EMPTY;
  /** Where in `pending` the next unread line starts. */
  private lineStart = 0;
  private dataLines: string[] = [];
  /** The last chunk ended in a CR, read as a line end: an LF that comes next is its second half. */
  private afterCr = false;

  /** The events a chunk completes (none, one or many). */
  push(chunk: Buffer): SseEvent[] {
    const buffer = this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk]);
    const events: SseEvent[] = [];
    let eventStart = 0;
    let at = this.lineStart;
    if (this.afterCr && at < buffer.length) {
      this.afterCr = false;
      if (buffer[at] === LF) at += 1; // its bytes go with the next event, passed on unchanged
    }
    for (let i = at; i < buffer.length; i++) {
      const byte = buffer[i];
      if (byte !== LF && byte !== CR) continue;
      // A CR ends its line at once, even as the last byte so far (an event ending there must not
      // wait for more bytes, which may never come); an LF right after it is skipped, here or in
      // the next chunk.
      if (byte === CR && i + 1 === buffer.length) this.afterCr = true;
      const next = byte === CR && buffer[i + 1] === LF ? i + 2 : i + 1;
      if (i === at) {
        events.push({
          bytes: buffer.subarray(eventStart, next),
          data: this.dataLines.length === 0 ? undefined : this.dataLines.join('\n'),
        });
        this.dataLines = [];
        eventStart = next;
      } else {
        this.readLine(buffer.subarray(at, i));
      }
      at = next;
      i = next - 1;
    }
    this.pending = buffer.subarray(eventStart);
    this.lineStart = at - eventStart;
    return events;
  }

  /** Bytes of an event that has not ended (at the end of the stream: one a client would drop). */
  rest(): Buffer {
    return this.pending;
  }

  private readLine(line: Buffer): void {
    // Only `data` matters here: `event`, `id`, `retry` and comments pass through untouched.
    if (line.length < 4 || !line.subarray(0, 4).equals(DATA_FIELD)) return;
    if (line.length === 4) {
      this.dataLines.push('');
      return;
    }
    if (line[4] !== 0x3a) return; // "database: x" is another field
    const value = line[5] === 0x20 ? line.subarray(6) : line.subarray(5);
    this.dataLines.push(value.toString('utf8'));
  }
}
