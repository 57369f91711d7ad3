// A repeat attached to the answer its key's first request is streaming (onConcurrent: attach;
// store/live-answer.ts): its client gets the head, what was sent so far, then each chunk as the
// first client does, and the same end — after the record is stored — or the same break.
//
// The first request's pace is the upstream's and its own client's; a repeat never slows it. What a
// repeat has not taken yet waits in its socket's buffer: chunks the capture keeps anyway, until the
// answer outgrows maxResponseBytes. A repeat that falls further behind than that is cut off (its
// retry replays the record), so a slow reader cannot make the proxy hold an unbounded stream.
import type { ServerResponse } from 'node:http';
import type { LiveAnswer, LiveListener } from '../store/live-answer';
import type { HeaderPairs } from '../store/record';
import { startStreaming } from './outgoing';
import type { AttachEnd, ProtectedRequest } from './protocol';

/**
 * Attaches the request's client to `live` (protocols' `attach`), with `headers(head)` as the head's headers; undefined
 * when the answer can no longer be joined whole.
 */
export function attachClient(
  request: ProtectedRequest,
  live: LiveAnswer,
  headers: (stored: HeaderPairs) => HeaderPairs,
  /** The last bytes this client gets, from the final message the first request's answer ended with. */
  closing: (final: Buffer | undefined) => Buffer | undefined = () => undefined,
): Promise<AttachEnd> | undefined {
  const { res, timings } = request;
  const maxBehind = request.policy.maxResponseBytes;
  let finish!: (end: AttachEnd) => void;
  const ended = new Promise<AttachEnd>((resolve) => (finish = resolve));
  const listener: LiveListener = {
    chunk(chunk) {
      if (res.destroyed) return;
      res.write(chunk);
      if (res.writableLength > maxBehind) cut(res, live, listener);
    },
    end(final) {
      if (!res.destroyed) res.end(closing(final));
      finish('ended');
    },
    fail() {
      res.destroy();
      finish('failed');
    },
  };
  const joined = live.attach(listener);
  if (joined === undefined) return undefined;
  res.once('close', () => {
    live.detach(listener);
    finish(res.writableFinished ? 'ended' : 'gone');
  });
  startStreaming(res, joined.head.status, headers(joined.head.headers), undefined);
  for (const chunk of joined.sofar) res.write(chunk);
  if (joined.sofar.length > 0) timings.firstByte = performance.now() - timings.startedAt;
  return ended;
}

/** A repeat too far behind: let go of it (its socket's buffer with it). */
function cut(res: ServerResponse, live: LiveAnswer, listener: LiveListener): void {
  live.detach(listener);
  res.destroy();
}
