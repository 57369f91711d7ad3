// Repeats of a key this process works on: the leader's phases wake the repeats that wait on them,
// one change at a time, and its result reaches every repeat still waiting (the promises they wait
// on are made only when a repeat asks). With onConcurrent: attach, a repeat of a key whose first
// request streams its answer joins the stream; one that cannot (no stream, or one past its
// capture) waits for the result.
import { type FollowOptions, LocalKeys } from '../../src/store/local-keys';
import { LiveAnswer } from '../../src/store/live-answer';
import { StreamCapture } from '../../src/protected/stream-capture';
import type { StoredResponse } from '../../src/store/record';

const FINGERPRINT = Buffer.from('fp');
const STORED: StoredResponse = {
  status: 201,
  headers: [],
  body: Buffer.from('done'),
  bodyOmitted: false,
  outcomeUnknown: false,
};

function options(mode: FollowOptions['mode']): FollowOptions {
  return {
    fingerprint: FINGERPRINT,
    raw: undefined,
    mode,
    deadline: performance.now() + 5_000,
    maxWaiters: 10,
    gone: () => new Promise(() => undefined),
    leaseMs: 5_000,
  };
}

const tick = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, 5));

test('a repeat that waits through two phase changes is woken by each, and attaches at the second', async () => {
  const keys = new LocalKeys();
  const leader = keys.lead('k', FINGERPRINT)!;
  let followed: unknown;
  void keys.follow('k', options('attach')).then((result) => (followed = result));
  await tick();
  expect(followed).toBeUndefined(); // still claiming
  const live = new LiveAnswer();
  leader.forwarding(5_000, live);
  await tick();
  expect(followed).toBeUndefined(); // forwarding, but nothing streams yet
  live.open({ status: 200, headers: [] }, new StreamCapture(100));
  await tick();
  expect(followed).toEqual({ kind: 'attached', live });
});

test('repeats that reject are all answered 409 with the lease the phase change tells', async () => {
  const keys = new LocalKeys();
  const leader = keys.lead('k', FINGERPRINT)!;
  const repeats = [keys.follow('k', options('reject')), keys.follow('k', options('reject'))];
  await tick();
  leader.waiting(3_000);
  for (const repeat of await Promise.all(repeats)) {
    expect(repeat).toMatchObject({ kind: 'in-flight' });
    const { leaseRemainingMs } = repeat as { leaseRemainingMs: number };
    expect(leaseRemainingMs).toBeGreaterThan(2_000);
    expect(leaseRemainingMs).toBeLessThanOrEqual(3_000);
  }
});

test('every repeat still waiting gets the result, and the key is free for the next leader', async () => {
  const keys = new LocalKeys();
  const leader = keys.lead('k', FINGERPRINT)!;
  leader.forwarding(5_000);
  const repeats = [keys.follow('k', options('wait')), keys.follow('k', options('wait'))];
  await tick();
  leader.settle({ kind: 'completed', response: STORED });
  leader.settle({ kind: 'ask-store' }); // a second settle changes nothing
  for (const repeat of await Promise.all(repeats))
    expect(repeat).toMatchObject({ kind: 'completed', response: STORED });
  expect(keys.has('k')).toBe(false);
  expect(keys.lead('k', FINGERPRINT)).toBeDefined();
});

test('a leader no repeat asked of settles and leaves nothing behind', () => {
  const keys = new LocalKeys();
  const leader = keys.lead('k', FINGERPRINT)!;
  expect(keys.lead('k', FINGERPRINT)).toBeUndefined();
  leader.forwarding(5_000);
  leader.settle({ kind: 'completed', response: STORED });
  expect(keys.size).toBe(0);
});

describe('onConcurrent: attach', () => {
  test('a repeat waits for the first request’s answer to stream, then attaches to it', async () => {
    const keys = new LocalKeys();
    const live = new LiveAnswer();
    const leader = keys.lead('k', FINGERPRINT)!;
    leader.forwarding(5_000, live);
    let followed: unknown;
    void keys.follow('k', options('attach')).then((result) => (followed = result));
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
    const followed = keys.follow('k', options('attach'));
    await tick(); // timers run: the wait is not a busy loop
    leader.settle({ kind: 'completed', response: STORED });
    await expect(followed).resolves.toMatchObject({ kind: 'completed', response: STORED });
  });

  test('a repeat of an answer that is not a stream waits for the stored result', async () => {
    const keys = new LocalKeys();
    const live = new LiveAnswer();
    const leader = keys.lead('k', FINGERPRINT)!;
    leader.forwarding(5_000, live);
    const followed = keys.follow('k', options('attach'));
    live.close();
    await tick();
    leader.settle({ kind: 'completed', response: STORED });
    await expect(followed).resolves.toMatchObject({ kind: 'completed', response: STORED });
  });
});
