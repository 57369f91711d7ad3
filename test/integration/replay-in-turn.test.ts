// A repeat the replay cache can answer is answered in the turn its body ended: its head is written
// from inside the body's 'end' event, before any promise the pipeline could have made runs. Seen from
// inside the real app (in-process, real PostgreSQL, a real upstream): each request is watched from
// the moment its 'end' event starts until the microtask queue it leaves behind runs.
import type http from 'node:http';
import { send, type TestResponse } from '../support/http';
import { startProxy, type TestProxy } from '../support/proxy';
import { startUpstream, type TestUpstream } from '../support/upstream';
import { until } from '../support/eventually';

let upstream: TestUpstream;
beforeAll(async () => {
  upstream = await startUpstream();
});
afterAll(() => upstream.close());

const yaml = (replayCache: string): string => `
upstreams:
  app: { url: ${upstream.url} }
store: { replayCache: ${replayCache} }
routes:
  - name: orders
    match: { path: /orders }
    upstream: app
    idempotency: {}
`;

/** Per request path and key: whether its head was written inside its body's 'end' event. */
interface Watched {
  readonly proxy: TestProxy;
  /** Whether the answer to the last request with `key` was written in the turn its body ended. */
  inTurn(key: string): boolean | undefined;
  post(key: string, body: string): Promise<TestResponse>;
}

async function watched(replayCache: string): Promise<Watched> {
  const proxy = await startProxy({ yaml: yaml(replayCache) });
  const seen = new Map<string, boolean>();
  // Runs before the app's own handler, so its 'end' listener is the first one called.
  proxy.app.server.prependListener(
    'request',
    (req: http.IncomingMessage, res: http.ServerResponse) => {
      const key = String(req.headers['idempotency-key']);
      let ending = false;
      req.prependListener('end', () => {
        ending = true;
        // The first microtask after the event: any promise the path made resolves after it.
        queueMicrotask(() => (ending = false));
      });
      const writeHead = res.writeHead.bind(res) as (...args: unknown[]) => http.ServerResponse;
      res.writeHead = ((...args: unknown[]) => {
        seen.set(key, ending);
        return writeHead(...args);
      }) as typeof res.writeHead;
    },
  );
  if (proxy.cache) await until(() => proxy.cache!.live, 'the replay cache to go live');
  return {
    proxy,
    inTurn: (key) => seen.get(key),
    post: (key, body) =>
      send(`${proxy.url}/orders`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': key },
        body,
      }),
  };
}

describe('with the replay cache on', () => {
  let w: Watched;
  beforeAll(async () => {
    w = await watched('32mb');
  });
  afterAll(() => w.proxy.close());

  test('the first repeat is claimed through the store; the next ones are answered in the turn their body ended', async () => {
    const before = upstream.executions().length;
    const first = await w.post('turn-1', '{"amount":5}');
    expect(first.status).toBe(201);
    expect(w.inTurn('turn-1')).toBe(false);
    // The first repeat finds the completed record in PostgreSQL and admits it to the cache.
    const second = await w.post('turn-1', '{"amount":5}');
    expect(second.headers['idempotent-replayed']).toBe('true');
    expect(w.inTurn('turn-1')).toBe(false);
    for (let i = 0; i < 3; i++) {
      const repeat = await w.post('turn-1', '{"amount":5}');
      expect(repeat.status).toBe(201);
      expect(repeat.headers['idempotent-replayed']).toBe('true');
      expect(repeat.headers['idempotency-expires']).toBe(second.headers['idempotency-expires']);
      expect(repeat.headers['content-length']).toBe(String(first.body.length));
      expect(repeat.body.equals(first.body)).toBe(true);
      expect(w.inTurn('turn-1')).toBe(true);
    }
    expect(upstream.executions().length).toBe(before + 1);
    const lines = w.proxy.logs.filter((l) => l.msg === 'request' && l.key === 'turn-1');
    expect(lines.map((l) => [l.outcome, l.cached ?? false])).toEqual([
      ['executed', false],
      ['replayed', false],
      ['replayed', true],
      ['replayed', true],
      ['replayed', true],
    ]);
    // Answers memory gives still reach the record's counters.
    await w.proxy.flushCounters();
    const row = await w.proxy.pool.query<{ attempts: number; replays: number }>(
      `SELECT attempts, replays FROM ${w.proxy.table} WHERE key = $1`,
      ['turn-1'],
    );
    expect(row.rows[0]).toMatchObject({ attempts: 5, replays: 4 });
  });

  test('another spelling of the same JSON replays in turn; another payload is refused 422 in turn', async () => {
    await w.post('turn-2', '{"amount":7,"note":"a"}');
    await w.post('turn-2', '{"amount":7,"note":"a"}');
    const respelled = await w.post('turn-2', '{ "note": "a", "amount": 7.0 }');
    expect(respelled.headers['idempotent-replayed']).toBe('true');
    expect(w.inTurn('turn-2')).toBe(true);
    const other = await w.post('turn-2', '{"amount":8,"note":"a"}');
    expect(other.status).toBe(422);
    expect(other.headers['content-type']).toBe('application/problem+json');
    expect(w.inTurn('turn-2')).toBe(true);
    const outcomes = w.proxy.logs
      .filter((l) => l.msg === 'request' && l.key === 'turn-2')
      .map((l) => l.outcome);
    expect(outcomes).toEqual(['executed', 'replayed', 'replayed', 'mismatch']);
  });

  test('a body with a key twice is refused 400 on the store path, never answered from memory', async () => {
    await w.post('turn-3', '{"amount":1}');
    await w.post('turn-3', '{"amount":1}');
    const duplicate = await w.post('turn-3', '{"amount":1,"amount":2}');
    expect(duplicate.status).toBe(400);
    expect(duplicate.json()).toMatchObject({ code: 'JSON_DUPLICATE_KEY' });
    expect(w.inTurn('turn-3')).toBe(false);
  });
});

test('with the replay cache off, every repeat is claimed through the store', async () => {
  const w = await watched('0b');
  try {
    await w.post('turn-off', '{"amount":5}');
    for (let i = 0; i < 3; i++) {
      const repeat = await w.post('turn-off', '{"amount":5}');
      expect(repeat.headers['idempotent-replayed']).toBe('true');
      expect(w.inTurn('turn-off')).toBe(false);
    }
  } finally {
    await w.proxy.close();
  }
});
