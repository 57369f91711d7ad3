import { eventually, until } from '../support/eventually';

describe('eventually', () => {
  test('retries a failing assertion until it passes and resolves its value', async () => {
    let calls = 0;
    const value = await eventually(
      () => {
        calls += 1;
        expect(calls).toBeGreaterThanOrEqual(3);
        return `passed on ${calls}`;
      },
      { intervalMs: 1 },
    );
    expect(value).toBe('passed on 3');
    expect(calls).toBe(3);
  });

  test('awaits an async check', async () => {
    let calls = 0;
    await eventually(
      async () => {
        calls += 1;
        await Promise.resolve();
        if (calls < 2) throw new Error('not yet');
      },
      { intervalMs: 1 },
    );
    expect(calls).toBe(2);
  });

  test('after the deadline, fails with the last error, the time waited and the attempts', async () => {
    let calls = 0;
    const started = Date.now();
    const failure = await eventually(
      () => {
        calls += 1;
        throw new Error(`failure ${calls}`);
      },
      { timeoutMs: 100, intervalMs: 10 },
    ).catch((error: unknown) => error as Error);
    const elapsedMs = Date.now() - started;

    expect(elapsedMs).toBeGreaterThanOrEqual(100);
    expect(calls).toBeGreaterThan(2);
    expect(failure.message).toMatch(
      new RegExp(`^still failing after \\d+ ms \\(${calls} attempts\\): failure ${calls}$`),
    );
    expect((failure.cause as Error).message).toBe(`failure ${calls}`);
  });

  test('carries a jest expectation failure', async () => {
    await expect(eventually(() => expect(1).toBe(2), { timeoutMs: 30 })).rejects.toThrow(
      'Expected: 2',
    );
  });
});

describe('until', () => {
  test('resolves the first truthy value', async () => {
    const seen = [0, 0, 7];
    let calls = 0;
    const found = await until(() => seen[calls++], 'a non-zero number', { intervalMs: 1 });
    expect(found).toBe(7);
    expect(calls).toBe(3);
  });

  test('fails naming what it waited for', async () => {
    await expect(until(() => false, 'the upstream to answer', { timeoutMs: 50 })).rejects.toThrow(
      /^timed out after \d+ ms waiting for the upstream to answer$/,
    );
  });

  test('retries a predicate that throws and names its last error', async () => {
    await expect(
      until(
        () => {
          throw new Error('connection refused');
        },
        'the server',
        { timeoutMs: 50 },
      ),
    ).rejects.toThrow(/waiting for the server \(last error: connection refused\)$/);
  });
});
