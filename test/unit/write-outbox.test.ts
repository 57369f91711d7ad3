// The outbox of writes that must land: a failed write is sent again until it lands, its token moved
// on, or its record expired; rounds back off (jittered, exponential) while the store fails; it is
// bounded by count and bytes (the oldest goes); a write refused for good is dropped without holding
// up the rest; shutdown drains it with a deadline.
import {
  type AttemptResult,
  type OutboxOptions,
  type OutboxWrite,
  type Settlement,
  WriteOutbox,
} from '../../src/store/postgres/write-outbox';

/** A connection-level failure (no SQLSTATE): retryable. */
const connectionLost = (): Error => new Error('Connection terminated unexpectedly');
/** A failure PostgreSQL means for good. */
const refused = (): Error => Object.assign(new Error('invalid input'), { code: '22P02' });
const retryable = (error: unknown): boolean => (error as { code?: string }).code === undefined;

interface TestWrite extends OutboxWrite<'complete'> {
  readonly name: string;
  calls: number;
}

/** A write whose attempts answer from `script` in turn (the last one repeats). */
function write(
  name: string,
  script: (AttemptResult | (() => Error))[],
  options: { bytes?: number; expiresAt?: number; key?: string } = {},
): TestWrite {
  const w: TestWrite = {
    kind: 'complete',
    key: options.key ?? name,
    name,
    calls: 0,
    bytes: options.bytes ?? 10,
    expiresAt: options.expiresAt ?? Infinity,
    attempt: async () => {
      const step = script[Math.min(w.calls, script.length - 1)]!;
      w.calls++;
      if (typeof step === 'function') throw step();
      return step;
    },
  };
  return w;
}

function outbox(options: Partial<OutboxOptions<TestWrite>> = {}) {
  const settled: [string, Settlement][] = [];
  const retried: string[] = [];
  const box = new WriteOutbox<TestWrite>({
    maxWrites: 100,
    maxBytes: 10_000,
    retryable,
    firstDelayMs: 40,
    maxDelayMs: 200,
    random: () => 0,
    onRetry: (w) => retried.push(w.name),
    onSettled: (w, s) => settled.push([w.name, s]),
    ...options,
  });
  return { box, settled, retried };
}

afterEach(() => {
  jest.useRealTimers();
});

/** Resolves once `done` holds, looking every few milliseconds (real timers). */
async function until(done: () => boolean): Promise<void> {
  for (let waited = 0; !done(); waited += 5) {
    if (waited > 5_000) throw new Error('never came true');
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

test('a write whose first attempt failed is sent again at once and lands; it counts as a retry', async () => {
  const { box, retried } = outbox();
  const w = write('a', ['landed']);
  await expect(box.add(w)).resolves.toEqual({ kind: 'landed', attempts: 2 });
  expect(w.calls).toBe(1);
  expect(retried).toEqual(['a']);
  expect(box.pending).toEqual({ writes: 0, bytes: 0 });
});

test('a write added with no attempt made yet (a lost claim) is not a retry on its first send', async () => {
  const { box, retried } = outbox();
  await expect(box.add(write('a', ['stale']), 0)).resolves.toEqual({ kind: 'stale', attempts: 1 });
  expect(retried).toEqual([]);
});

test('a write whose row no longer carries its token leaves as stale', async () => {
  const { box, settled } = outbox();
  await expect(box.add(write('a', ['stale']))).resolves.toMatchObject({ kind: 'stale' });
  expect(settled).toEqual([['a', { kind: 'stale', attempts: 2 }]]);
});

test('rounds back off while the store fails: jittered delays that double up to the cap, then it lands', async () => {
  jest.useFakeTimers();
  const { box } = outbox({ random: () => 0 });
  const w = write('a', [connectionLost, connectionLost, connectionLost, connectionLost, 'landed']);
  const settled = box.add(w);
  await jest.advanceTimersByTimeAsync(0);
  expect(w.calls).toBe(1); // the immediate retry failed
  // random 0: half of each ceiling. Ceilings 40, 80, 160, then capped at 200.
  for (const [wait, calls] of [
    [19, 1],
    [1, 2],
    [39, 2],
    [1, 3],
    [79, 3],
    [1, 4],
    [99, 4],
    [1, 5],
  ] as const) {
    await jest.advanceTimersByTimeAsync(wait);
    expect(w.calls).toBe(calls);
  }
  await expect(settled).resolves.toEqual({ kind: 'landed', attempts: 6 });
});

test('the jitter spreads a delay between half and all of its ceiling', async () => {
  jest.useFakeTimers();
  const { box } = outbox({ random: () => 0.999 });
  const w = write('a', [connectionLost, 'landed']);
  void box.add(w);
  await jest.advanceTimersByTimeAsync(0);
  await jest.advanceTimersByTimeAsync(38);
  expect(w.calls).toBe(1);
  await jest.advanceTimersByTimeAsync(2);
  expect(w.calls).toBe(2);
});

test('a round stops at a retryable failure: the writes after it wait for the next round', async () => {
  jest.useFakeTimers();
  const { box } = outbox({ concurrency: 1 });
  const first = write('first', [connectionLost, 'landed']);
  const second = write('second', ['landed']);
  // Both are queued before the first round starts (a failed batch's completions arrive together).
  const a = box.add(first);
  const b = box.add(second);
  await jest.advanceTimersByTimeAsync(0);
  expect([first.calls, second.calls]).toEqual([1, 0]);
  await jest.advanceTimersByTimeAsync(20);
  await expect(Promise.all([a, b])).resolves.toEqual([
    { kind: 'landed', attempts: 3 },
    { kind: 'landed', attempts: 2 },
  ]);
});

test('a write refused for good is dropped, loudly, and the round goes on', async () => {
  const { box, settled } = outbox({ concurrency: 1 });
  const bad = write('bad', [refused]);
  const good = write('good', ['landed']);
  const results = Promise.all([box.add(bad), box.add(good)]);
  const [badResult, goodResult] = await results;
  expect(badResult).toMatchObject({ kind: 'dropped', reason: 'failed' });
  expect((badResult as { error: Error }).error.message).toBe('invalid input');
  expect(goodResult).toMatchObject({ kind: 'landed' });
  expect(settled.map(([name, s]) => [name, s.kind])).toEqual([
    ['bad', 'dropped'],
    ['good', 'landed'],
  ]);
});

test('past maxWrites the oldest write is dropped (bound)', async () => {
  jest.useFakeTimers();
  const { box, settled } = outbox({ maxWrites: 2 });
  const writes = ['a', 'b', 'c'].map((name) => write(name, [connectionLost]));
  const results = writes.map((w) => box.add(w));
  await expect(results[0]).resolves.toEqual({ kind: 'dropped', reason: 'bound' });
  expect(box.pending.writes).toBe(2);
  expect(settled).toEqual([['a', { kind: 'dropped', reason: 'bound' }]]);
  await box.drain(0);
});

test('past maxBytes the oldest writes are dropped until the rest fit', async () => {
  jest.useFakeTimers();
  const { box } = outbox({ maxBytes: 100 });
  const a = box.add(write('a', [connectionLost], { bytes: 40 }));
  const b = box.add(write('b', [connectionLost], { bytes: 40 }));
  void box.add(write('c', [connectionLost], { bytes: 70 }));
  await expect(a).resolves.toEqual({ kind: 'dropped', reason: 'bound' });
  await expect(b).resolves.toEqual({ kind: 'dropped', reason: 'bound' });
  expect(box.pending).toEqual({ writes: 1, bytes: 70 });
  await box.drain(0);
});

test('a write whose record has expired is dropped without being sent', async () => {
  const { box } = outbox();
  const w = write('a', ['landed'], { expiresAt: performance.now() - 1 });
  await expect(box.add(w)).resolves.toEqual({ kind: 'dropped', reason: 'expired' });
  expect(w.calls).toBe(0);
});

test('drain sends what is pending without the long pauses, and gives up what is left at its deadline', async () => {
  const { box } = outbox({ firstDelayMs: 60_000, maxDelayMs: 60_000 });
  const soon = write('soon', [connectionLost, connectionLost, 'landed']);
  const never = write('never', [connectionLost]);
  const results = [box.add(soon), box.add(never)];
  // The first round failed: the outbox backs off a minute, which drain does not wait for. `soon`
  // lands after one of drain's short pauses (200 ms); the deadline leaves room for a loaded machine
  // (at 300 ms a busy CI run once missed it), and is still far short of the minute's backoff.
  await new Promise((resolve) => setImmediate(resolve));
  const left = await box.drain(2_000);
  expect(left.map((w) => w.name)).toEqual(['never']);
  await expect(Promise.all(results)).resolves.toEqual([
    { kind: 'landed', attempts: 4 },
    { kind: 'dropped', reason: 'shutdown' },
  ]);
  // Nothing is kept after a drain.
  await expect(box.add(write('late', ['landed']))).resolves.toEqual({
    kind: 'dropped',
    reason: 'shutdown',
  });
});

test('an attempt that hangs does not hold a drain past its deadline', async () => {
  const { box } = outbox();
  const hanging: TestWrite = {
    ...write('hang', ['landed']),
    attempt: () => new Promise<AttemptResult>(() => undefined),
  };
  void box.add(hanging);
  const left = await box.drain(100);
  expect(left).toHaveLength(1);
});

test('sendNow sends the writes of one key at once, whatever the backoff, and leaves the others waiting', async () => {
  const { box, settled } = outbox({ firstDelayMs: 60_000, maxDelayMs: 60_000 });
  const a = write('a', [connectionLost, 'landed'], { key: 'k1' });
  const b = write('b', [connectionLost, 'landed'], { key: 'k2' });
  void box.add(a);
  void box.add(b);
  await until(() => a.calls === 1);
  expect(b.calls).toBe(0); // the round stopped at a: b waits for the next, far off
  expect(box.holds('k1')).toBe(true);
  expect(box.writesOf('k1')).toEqual([a]);
  await box.sendNow('k1');
  expect(settled).toEqual([['a', { kind: 'landed', attempts: 3 }]]);
  expect(box.holds('k1')).toBe(false);
  expect(box.holds('k2')).toBe(true);
  expect(b.calls).toBe(0);
});

test('sendNow rejects with the failure of an attempt that may succeed later, and the write stays', async () => {
  const { box } = outbox({ firstDelayMs: 60_000, maxDelayMs: 60_000 });
  const a = write('a', [connectionLost], { key: 'k1' });
  void box.add(a);
  await until(() => a.calls === 1);
  await expect(box.sendNow('k1')).rejects.toThrow('Connection terminated');
  expect(box.holds('k1')).toBe(true);
  await expect(box.sendNow('nobody')).resolves.toBeUndefined();
});

test('sendNow joins an attempt under way instead of sending the write twice', async () => {
  const { box, settled } = outbox();
  let finish!: (result: AttemptResult) => void;
  let calls = 0;
  const slow: TestWrite = {
    kind: 'complete',
    key: 'k',
    name: 'slow',
    calls: 0,
    bytes: 1,
    expiresAt: Infinity,
    attempt: () => {
      calls++;
      return new Promise((resolve) => (finish = resolve));
    },
  };
  void box.add(slow, 0);
  await until(() => calls === 1);
  const now = box.sendNow('k');
  finish('landed');
  await now;
  expect(calls).toBe(1);
  expect(settled).toEqual([['slow', { kind: 'landed', attempts: 1 }]]);
});

test('wake cuts a backoff short: the next round starts at once', async () => {
  const { box, settled } = outbox({ firstDelayMs: 60_000, maxDelayMs: 60_000 });
  const a = write('a', [connectionLost, 'landed']);
  void box.add(a);
  await until(() => a.calls === 1);
  box.wake();
  await until(() => settled.length === 1);
  expect(settled).toEqual([['a', { kind: 'landed', attempts: 3 }]]);
});
