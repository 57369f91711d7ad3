// The protected pipeline (src/protected/pipeline.ts) end to end through the real app and a real
// upstream, over the in-memory KeyStore behind the coalescing store: what it leaves in the store for
// each claim state, how it waits, and that a store failure forwards nothing. The same paths against
// PostgreSQL are the integration suite's; this one can seed a record as another instance left it.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import pino from 'pino';
import { createApp, type App } from '../../src/app';
import { parseConfigText } from '../../src/compiler/load';
import { CoalescingStore } from '../../src/store/coalescing-store';
import type { RecordId, StoredResponse } from '../../src/store/record';
import { MemoryKeyStore } from '../support/memory-key-store';
import { send, type TestResponse } from '../support/http';
import { sleep, startUpstream, type TestUpstream } from '../support/upstream';
import { until } from '../support/eventually';

const STORED: StoredResponse = {
  status: 201,
  headers: [['content-type', 'text/plain']],
  body: Buffer.from('created'),
  bodyOmitted: false,
  outcomeUnknown: false,
};
/** The fence of a seeded record's holder: another instance's claim. */
const THEIRS = '00000000-0000-4000-8000-000000000001';
const BODY = '{"amount":5}';

let upstream: TestUpstream;

beforeAll(async () => {
  upstream = await startUpstream(async (req, res) => {
    if (req.headers['x-wait']) await sleep(Number(req.headers['x-wait']));
    res.writeHead(201, { 'content-type': 'text/plain' });
    res.end('from upstream');
  });
});

afterAll(() => upstream.close());

interface Harness {
  readonly memory: MemoryKeyStore;
  readonly url: string;
  readonly logs: Record<string, unknown>[];
  /** The record a request with `key` claims on the route. */
  id(key: string): RecordId;
  post(key: string, headers?: Record<string, string>): Promise<TestResponse>;
  close(): Promise<void>;
}

const open: App[] = [];
afterEach(async () => {
  for (const app of open.splice(0)) await app.close(100);
});

/** The app on port 0, its one route `orders` protected with `settings`. */
async function harness(settings: string): Promise<Harness> {
  const config = parseConfigText(
    `upstreams:\n  app: { url: ${upstream.url} }\nroutes:\n  - name: orders\n    match: { path: /orders }\n    upstream: app\n    idempotency: { ${settings} }\n`,
    'proxy.yaml',
    {},
  );
  const memory = new MemoryKeyStore();
  const logs: Record<string, unknown>[] = [];
  const logger = pino(
    { level: 'info', base: undefined },
    { write: (line: string) => logs.push(JSON.parse(line) as Record<string, unknown>) },
  );
  const app = createApp({ config, store: new CoalescingStore(memory, undefined), logger });
  open.push(app);
  await new Promise<void>((resolve) => app.server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  return {
    memory,
    url,
    logs,
    id: (key) => ({ scope: 'orders', tenant: '', key }),
    post: (key, headers = {}) =>
      send(`${url}/orders`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': key, ...headers },
        body: BODY,
      }),
    close: () => app.close(100),
  };
}

/** The fingerprint the proxy computes for BODY on /orders: read off a record it claimed itself. */
async function fingerprintOf(h: Harness): Promise<Buffer> {
  await h.post('probe');
  return h.memory.row(h.id('probe'))!.fingerprint;
}

/** A claim another instance holds on `key`, whose lease has just ended. */
async function seedLapsed(h: Harness, key: string): Promise<void> {
  const fingerprint = await fingerprintOf(h);
  h.memory.seed(h.id(key), {
    fingerprint,
    state: 'in_progress',
    leaseEndsAt: Date.now() - 1,
    token: THEIRS,
  });
}

const line = (h: Harness, key: string) =>
  h.logs.filter((l) => l.msg === 'request' && l.key === key).at(-1);

describe('what the pipeline leaves in the store', () => {
  test('a new key is claimed with the lease while it is forwarded, then completed', async () => {
    const h = await harness('lockTimeout: 5s');
    const answer = h.post('new-1', { 'x-wait': '300' });
    // Forwarded, so claimed: the upstream holds it 300 ms from here.
    await until(
      () => upstream.received.some((r) => r.headers['idempotency-key'] === 'new-1'),
      'new-1 at the upstream',
      { intervalMs: 10 },
    );
    const during = h.memory.row(h.id('new-1'))!;
    expect(during.state).toBe('in_progress');
    expect(during.leaseEndsAt - Date.now()).toBeGreaterThan(4_000);
    expect((await answer).status).toBe(201);
    expect(h.memory.row(h.id('new-1'))).toMatchObject({ state: 'completed', attempts: 1 });
    expect(line(h, 'new-1')).toMatchObject({ outcome: 'executed', attempts: 1 });
  });

  test('a lease that ended under fail is settled as the unknown outcome, counted, and replayed', async () => {
    const h = await harness('unknownOutcome: fail');
    await seedLapsed(h, 'lapsed-1');
    const before = upstream.executions().length;
    const res = await h.post('lapsed-1');
    expect(res.status).toBe(502);
    expect(res.headers['idempotency-outcome']).toBe('unknown');
    expect(JSON.parse(res.body.toString()).code).toBe('IDEMPOTENCY_OUTCOME_UNKNOWN');
    expect(h.memory.row(h.id('lapsed-1'))).toMatchObject({ state: 'completed', attempts: 2 });
    expect(h.memory.row(h.id('lapsed-1'))!.response).toMatchObject({ outcomeUnknown: true });
    expect(line(h, 'lapsed-1')).toMatchObject({
      outcome: 'replayed',
      attempts: 2,
      outcomeUnknown: true,
    });
    expect(upstream.executions().length).toBe(before);
  });

  test('a lease that ended under retry is taken over, fencing out the first holder', async () => {
    const h = await harness('unknownOutcome: retry');
    await seedLapsed(h, 'lapsed-2');
    const before = upstream.executions().length;
    expect((await h.post('lapsed-2')).status).toBe(201);
    expect(upstream.executions().length).toBe(before + 1);
    expect(h.memory.row(h.id('lapsed-2'))!.token).not.toBe(THEIRS);
    expect((await h.memory.complete(h.id('lapsed-2'), THEIRS, STORED, 1_000)).landing).toBe(
      'stale',
    );
  });

  test('shadow mode leaves every record alone but its counters, and forwards each request', async () => {
    const h = await harness('enforce: false');
    const fingerprint = await fingerprintOf(h);
    const seeds = {
      completed: { fingerprint, state: 'completed' as const, response: STORED },
      mismatch: {
        fingerprint: Buffer.from('other'),
        state: 'completed' as const,
        response: STORED,
      },
      running: { fingerprint, state: 'in_progress' as const, token: THEIRS },
      'lease-over': {
        fingerprint,
        state: 'in_progress' as const,
        leaseEndsAt: Date.now() - 1,
        token: THEIRS,
      },
    };
    for (const [key, seed] of Object.entries(seeds)) {
      h.memory.seed(h.id(key), seed);
      const before = { ...h.memory.row(h.id(key))! };
      const res = await h.post(key);
      expect(res.body.toString()).toBe('from upstream');
      const after = h.memory.row(h.id(key))!;
      expect({ ...after, attempts: before.attempts, replays: before.replays }).toEqual(before);
    }
    expect(
      ['completed', 'mismatch', 'running', 'lease-over'].map((key) => line(h, key)?.shadow),
    ).toEqual(['would_replay', 'would_reject_mismatch', 'would_reject_in_flight', 'would_replay']);
  });
});

describe('waiting (onConcurrent: wait)', () => {
  async function running(h: Harness, key: string): Promise<void> {
    h.memory.seed(h.id(key), {
      fingerprint: await fingerprintOf(h),
      state: 'in_progress',
      leaseEndsAt: Date.now() + 3_000,
      token: THEIRS,
    });
  }

  /**
   * Resolves once `key`'s request has claimed (a claim among the store's calls after the first
   * `before`): it found the running record and waits, so what the test does next happens while it
   * waits (a busy machine can otherwise reach the claim after it).
   */
  function claimed(h: Harness, before: number, key: string): Promise<boolean> {
    return until(() => h.memory.calls.slice(before).includes('claim'), `${key}'s claim`);
  }

  /** Sends `key` and resolves once it waits (claimed). */
  async function waitingOn(h: Harness, key: string): Promise<{ response: Promise<TestResponse> }> {
    const before = h.memory.calls.length;
    const response = h.post(key);
    await claimed(h, before, key);
    return { response };
  }

  test('replays what the first request stores while this one waits', async () => {
    const h = await harness('onConcurrent: wait, waitTimeout: 5s');
    await running(h, 'w-1');
    const waiting = (await waitingOn(h, 'w-1')).response;
    await sleep(100);
    await h.memory.complete(h.id('w-1'), THEIRS, STORED, 60_000);
    const res = await waiting;
    expect(res.status).toBe(201);
    expect(res.body.toString()).toBe('created');
    expect(res.headers['idempotent-replayed']).toBe('true');
    expect(line(h, 'w-1')!.waitMs).toBeGreaterThan(0);
  });

  test('forwards itself when the first request is released', async () => {
    const h = await harness('onConcurrent: wait, waitTimeout: 5s');
    await running(h, 'w-2');
    const waiting = (await waitingOn(h, 'w-2')).response;
    await sleep(100);
    await h.memory.release(h.id('w-2'), THEIRS);
    expect((await waiting).body.toString()).toBe('from upstream');
    expect(line(h, 'w-2')).toMatchObject({ outcome: 'executed' });
  });

  test('answers 409 with what is left of the lease when waitTimeout runs out', async () => {
    const h = await harness('onConcurrent: wait, waitTimeout: 300ms');
    await running(h, 'w-3');
    const res = await h.post('w-3');
    expect(res.status).toBe(409);
    expect(res.headers['retry-after']).toBe('3');
    expect(line(h, 'w-3')).toMatchObject({ outcome: 'in_flight' });
  });

  test('stops when its client leaves, and logs client_gone', async () => {
    const h = await harness('onConcurrent: wait, waitTimeout: 5s');
    await running(h, 'w-4');
    const before = h.memory.calls.length;
    const req = http.request(`${h.url}/orders`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': 'w-4' },
    });
    req.on('error', () => undefined);
    req.end(BODY);
    await claimed(h, before, 'w-4');
    await sleep(100);
    req.destroy();
    for (let i = 0; i < 50 && line(h, 'w-4') === undefined; i++) await sleep(20);
    expect(line(h, 'w-4')).toMatchObject({ outcome: 'client_gone' });
  });
});

describe('a store that fails', () => {
  test('answers 503 whatever the claim would have been, and forwards nothing', async () => {
    const h = await harness('onConcurrent: wait');
    const fingerprint = await fingerprintOf(h);
    h.memory.seed(h.id('running'), { fingerprint, state: 'in_progress', token: THEIRS });
    await seedLapsed(h, 'lease-over');
    const before = upstream.executions().length;
    for (const key of ['absent', 'running', 'lease-over']) {
      h.memory.failWith = Object.assign(new Error('connect ECONNREFUSED'), {
        code: 'ECONNREFUSED',
      });
      const res = await h.post(key);
      expect(res.status).toBe(503);
      expect(JSON.parse(res.body.toString()).code).toBe('STORE_UNAVAILABLE');
      expect(line(h, key)).toMatchObject({ outcome: 'store_unavailable' });
    }
    expect(upstream.executions().length).toBe(before);
  });
});
