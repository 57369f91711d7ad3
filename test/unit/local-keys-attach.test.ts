// onConcurrent: attach in one process: a repeat of a key whose first request streams its answer
// joins the stream; one that cannot (no stream, or one past its capture) waits for the result.
import { LocalKeys, type FollowOptions } from '../../src/store/local-keys';
import { LiveAnswer } from '../../src/store/live-answer';
import { StreamCapture } from '../../src/protected/stream-capture';
import type { StoredResponse } from '../../src/store/record';

const FINGERPRINT = Buffer.from('fp');
const STORED: StoredResponse = {
  status: 200,
  headers: [],
  body: Buffer.from('whole'),
  bodyOmitted: false,
  outcomeUnknown: false,
};

function attachOptions(): FollowOptions {
  return {
    fingerprint: FINGERPRINT,
    raw: undefined,
    mode: 'attach',
    deadline: performance.now() + 5_000,
    maxWaiters: 10,
    gone: () => new Promise(() => undefined),
    leaseMs: 5_000,
  };
}

const tick = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, 5));

test('a repeat waits for the first request’s answer to stream, then attaches to it', async () => {
  const keys = new LocalKeys();
  const live = new LiveAnswer();
  const leader = keys.lead('k', FINGERPRINT)!;
  leader.forwarding(5_000, live);
  let followed: unknown;
  void keys.follow('k', attachOptions()).then((result) => (followed = result));
  await tick();
  expect(followed).toBeUndefined(); // no head yet: nothing to attach to
  live.open({ status: 200, headers: [] }, new StreamCapture(100));
  await tick();
  expect(followed).toEqual({ kind: 'attached', live });
});

test('a repeat of a stream past its capture waits for the stored result instead', async () => {
  const keys = new LocalKeys();
  const live = new LiveAnswer();
  const capture = new StreamCapture(1);
  const leader = keys.lead('k', FINGERPRINT)!;
  leader.forwarding(5_000, live);
  live.open({ status: 200, headers: [] }, capture);
  capture.add(Buffer.from('too long'));
  const followed = keys.follow('k', attachOptions());
  await tick(); // timers run: the wait is not a busy loop
  leader.settle({ kind: 'completed', response: STORED });
  await expect(followed).resolves.toMatchObject({ kind: 'completed', response: STORED });
});

test('a repeat of an answer that is not a stream waits for the stored result', async () => {
  const keys = new LocalKeys();
  const live = new LiveAnswer();
  const leader = keys.lead('k', FINGERPRINT)!;
  leader.forwarding(5_000, live);
  const followed = keys.follow('k', attachOptions());
  live.close();
  await tick();
  leader.settle({ kind: 'completed', response: STORED });
  await expect(followed).resolves.toMatchObject({ kind: 'completed', response: STORED });
});
