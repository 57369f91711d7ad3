// Repeats answered in memory (local-keys.ts: they joined this process's first request of their key)
// are attempts like any other: they reach the record's counters, with the replay cache off as on.
import { postJson } from '../support/http';
import { startProxy, type TestProxy } from '../support/proxy';
import { startWaitingUpstream, type TestUpstream } from '../support/upstream';

let upstream: TestUpstream;
const proxies: TestProxy[] = [];

beforeAll(async () => {
  upstream = await startWaitingUpstream();
});
afterAll(async () => {
  for (const proxy of proxies) await proxy.close();
  await upstream?.close();
});

test.each(['0b', '32mb'])(
  'replayCache %s: 20 concurrent repeats of one key execute once and all 21 count as attempts',
  async (replayCache) => {
    const proxy = await startProxy({
      yaml: `
store: { table: "\${TEST_TABLE}", replayCache: ${replayCache} }
upstreams: { api: { url: ${upstream.url} } }
routes:
  - name: jobs
    match: { method: POST, path: /jobs }
    upstream: api
    idempotency: { onConcurrent: wait }
`,
    });
    proxies.push(proxy);
    const key = `coalesced-${replayCache}`;
    const executionsBefore = upstream.executions().length;
    const first = postJson(`${proxy.url}/jobs`, key, { n: 1 }, { 'x-wait': '400' });
    // The repeats arrive while the first is forwarded: they join it in memory.
    await new Promise((resolve) => setTimeout(resolve, 100));
    const repeats = await Promise.all(
      Array.from({ length: 20 }, () => postJson(`${proxy.url}/jobs`, key, { n: 1 })),
    );
    expect((await first).status).toBe(201);
    expect(repeats.map((r) => `${r.status} ${r.headers['idempotent-replayed']}`)).toEqual(
      repeats.map(() => '201 true'),
    );
    expect(upstream.executions().length - executionsBefore).toBe(1);
    const coalesced = proxy.logs.filter(
      (line) => line.msg === 'request' && line.key === key && line.coalesced === true,
    );
    expect(coalesced.length).toBeGreaterThan(0); // or this test tests nothing

    await proxy.flushCounters();
    const { rows } = await proxy.pool.query(
      `SELECT attempts, replays FROM ${proxy.table} WHERE key = $1`,
      [key],
    );
    expect(rows).toEqual([{ attempts: 21, replays: 20 }]);
  },
);
