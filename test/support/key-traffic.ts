// A steady stream of new keys and retries against a protected route, for outage tests (failover, a
// flaky network): each worker sends a new key until it has a final answer, retrying it after a 503,
// a 409 or a dropped connection, and now and then sends a finished key again, as clients retry.
// Afterwards `settle` sends every key once more until it has a final answer, so every claim that the
// database lost shows up as a second upstream execution.
import { until } from './eventually';
import { postJson, type TestResponse } from './http';
import { sleep } from './upstream';

export interface Answer {
  readonly key: string;
  readonly status: number;
  readonly replayed: boolean;
  readonly at: number;
}

/** A key is done when the proxy gave its stored answer: executed, replayed, or settled unknown. */
function final(res: TestResponse): boolean {
  return res.status === 201 || res.status === 502 || res.status === 504;
}

export interface KeyTraffic {
  readonly answers: Answer[];
  /** Every key sent so far. */
  readonly keys: Set<string>;
  /** New keys answered 201 without a replay. */
  executedAnswers(): number;
  /** Resolves once `check` holds (polled every 20 ms), or fails after `timeoutMs`. */
  until(what: string, check: () => boolean, timeoutMs?: number): Promise<void>;
  /** Stops the workers (a key still unanswered is left to `settle`). */
  stop(): Promise<void>;
  /** Sends every key until it has a final answer; fails after `timeoutMs`. */
  settle(timeoutMs?: number): Promise<void>;
}

export function startKeyTraffic(options: {
  readonly url: string;
  readonly prefix: string;
  readonly workers: number;
  /** Per-request timeout: a request that hangs (a partition) counts as a failed attempt. */
  readonly requestTimeoutMs?: number;
}): KeyTraffic {
  const answers: Answer[] = [];
  const keys = new Set<string>();
  const done: string[] = [];
  let stopping = false;
  const send = async (key: string): Promise<TestResponse | undefined> => {
    const res = await withTimeout(
      postJson(options.url, key, { key }),
      options.requestTimeoutMs ?? 30_000,
    ).catch(() => undefined);
    answers.push({
      key,
      status: res?.status ?? 0,
      replayed: res?.headers['idempotent-replayed'] === 'true',
      at: Date.now(),
    });
    return res;
  };
  const worker = async (w: number): Promise<void> => {
    for (let i = 0; !stopping; i++) {
      const key = `${options.prefix}-${w}-${i}`;
      keys.add(key);
      for (;;) {
        const res = await send(key);
        if (res && final(res)) break;
        if (stopping) return;
        await sleep(20);
      }
      done.push(key);
      // Every third key, a finished key is sent again (a client that retries after success).
      if (i % 3 === 2) await send(done[Math.floor((i * 7919) % done.length)]!);
    }
  };
  const running = Array.from({ length: options.workers }, (_, w) => worker(w));
  const untilTraffic = async (
    what: string,
    check: () => boolean,
    timeoutMs = 60_000,
  ): Promise<void> => {
    await until(check, `key traffic: ${what}`, { timeoutMs });
  };
  return {
    answers,
    keys,
    executedAnswers: () => answers.filter((a) => a.status === 201 && !a.replayed).length,
    until: untilTraffic,
    async stop() {
      stopping = true;
      await Promise.all(running);
    },
    async settle(timeoutMs = 60_000) {
      const deadline = Date.now() + timeoutMs;
      const pending = [...keys];
      const settleOne = async (): Promise<void> => {
        for (let key = pending.pop(); key !== undefined; key = pending.pop()) {
          for (;;) {
            const res = await send(key);
            if (res && final(res)) break;
            if (Date.now() > deadline) throw new Error(`key ${key} never got a final answer`);
            // A claim the outage left in progress answers 409 until its lease ends.
            await sleep(res?.status === 409 ? 250 : 50);
          }
        }
      };
      await Promise.all(Array.from({ length: 4 }, settleOne));
    },
  };
}

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** Upstream executions per Idempotency-Key, and the keys executed more than once. */
export function executionCounts(keys: readonly string[]): {
  perKey: Map<string, number>;
  duplicates: string[];
} {
  const perKey = new Map<string, number>();
  for (const key of keys) perKey.set(key, (perKey.get(key) ?? 0) + 1);
  const duplicates = [...perKey].filter(([, n]) => n > 1).map(([key]) => key);
  return { perKey, duplicates };
}
