// Property: random interleavings of duplicate requests, upstream outcomes (success, released 503,
// dropped connection), lease takeovers and expiries never run one key twice within a record's life,
// and never answer a request with another request's response.
import fc from 'fast-check';
import { postJson } from '../support/http';
import { startProxy } from '../support/proxy';
import { sleep, startUpstream, type TestUpstream } from '../support/upstream';

type Fate = 'ok' | 'released' | 'drop';

interface Execution {
  /** When the client sent the request that caused this execution: a lower bound of its claim time. */
  sentAt: number;
  key: string;
  payload: string;
  fate: Fate;
  startedAt: number;
  endedAt: number;
}

const executions: Execution[] = [];
let upstream: TestUpstream;

beforeAll(async () => {
  upstream = await startUpstream(async (req, res, raw) => {
    const execution: Execution = {
      sentAt: Number(req.headers['x-sent-at']),
      key: String(req.headers['idempotency-key']),
      payload: req.body.toString(),
      fate: req.headers['x-fate'] as Fate,
      startedAt: Date.now(),
      endedAt: Number.POSITIVE_INFINITY,
    };
    executions.push(execution);
    await sleep(Number(req.headers['x-wait']));
    execution.endedAt = Date.now();
    if (execution.fate === 'drop') return void raw.socket.destroy();
    res.writeHead(execution.fate === 'released' ? 503 : 201, {
      'content-type': 'application/json',
    });
    res.end(JSON.stringify({ key: execution.key, payload: execution.payload }));
  });
});

afterAll(() => upstream?.close());

const LOCK_MS = 250;
// Every bound below chains lower bounds (a claim happens after its request was sent; a completion or
// release after the upstream answered), so the slack only covers clock granularity, not load.
const SLACK_MS = 5;

const scenario = fc.record({
  unknownOutcome: fc.constantFrom('fail', 'retry'),
  onConcurrent: fc.constantFrom('reject', 'wait'),
  ttlMs: fc.constantFrom(300, 3_600_000),
  requests: fc.array(
    fc.record({
      key: fc.constantFrom('a', 'b', 'c'),
      payload: fc.constantFrom('p1', 'p1', 'p1', 'p2'),
      delayMs: fc.integer({ min: 0, max: 400 }),
      waitMs: fc.integer({ min: 0, max: 350 }),
      fate: fc.constantFrom<Fate>('ok', 'ok', 'released', 'drop'),
    }),
    { minLength: 2, maxLength: 12 },
  ),
});

/** May `next` run after `prev` for the same key? Only when prev's record was gone by then. */
function allowedAfter(
  prev: Execution,
  next: Execution,
  mode: { unknownOutcome: string; ttlMs: number },
): boolean {
  if (prev.fate === 'released' && next.startedAt >= prev.endedAt - SLACK_MS) return true; // claim dropped
  if (mode.unknownOutcome === 'retry' && next.startedAt >= prev.sentAt + LOCK_MS - SLACK_MS)
    return true; // takeover
  if (next.startedAt >= prev.endedAt + mode.ttlMs - SLACK_MS) return true; // completed, then expired
  return next.startedAt >= prev.sentAt + LOCK_MS + mode.ttlMs - SLACK_MS; // settled unknown, then expired
}

test('no key runs twice within a record lifetime and no response belongs to another request', async () => {
  await fc.assert(
    fc.asyncProperty(scenario, async ({ unknownOutcome, onConcurrent, ttlMs, requests }) => {
      const run = `${Date.now()}-${Math.random().toString(36).slice(2)}`;
      const proxy = await startProxy({
        yaml: `
store:
  table: \${TEST_TABLE}
upstreams: { api: { url: ${upstream.url}, timeout: 5s } }
routes:
  - name: ops
    match: { path: /ops }
    upstream: api
    idempotency:
      unknownOutcome: ${unknownOutcome}
      onConcurrent: ${onConcurrent}
      waitTimeout: 1s
      lockTimeout: ${LOCK_MS}ms
      ttl: ${ttlMs}ms
`,
      });
      const first = executions.length;
      try {
        const answers = await Promise.all(
          requests.map(async (r) => {
            await sleep(r.delayMs);
            const key = `${run}-${r.key}`;
            const res = await postJson(`${proxy.url}/ops`, key, r.payload, {
              'x-wait': String(r.waitMs),
              'x-fate': r.fate,
              'x-sent-at': String(Date.now()),
            });
            return { key, payload: JSON.stringify(r.payload), res };
          }),
        );
        await sleep(400); // let dropped or slow executions finish before judging
        for (const { key, payload, res } of answers) {
          expect([201, 409, 422, 502, 503, 504]).toContain(res.status);
          if (res.status === 201) expect(res.json()).toEqual({ key, payload });
        }
        const mine = executions.slice(first);
        for (const key of new Set(mine.map((e) => e.key))) {
          const runs = mine.filter((e) => e.key === key).sort((x, y) => x.startedAt - y.startedAt);
          for (let i = 1; i < runs.length; i++) {
            if (!allowedAfter(runs[i - 1]!, runs[i]!, { unknownOutcome, ttlMs })) {
              throw new Error(
                `key ${key} ran twice: ${JSON.stringify(runs)} (${unknownOutcome}, ttl ${ttlMs})`,
              );
            }
          }
        }
      } finally {
        await proxy.close();
      }
    }),
    { numRuns: 25, endOnFailure: true }, // a failure is reported at once, without a long shrink
  );
}, 180_000);
