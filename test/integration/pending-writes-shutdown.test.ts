// PostgreSQL goes away between a forward and its completion: the client gets its answer after
// store.outbox.holdAnswer (the log line says `landing: queued`) and the proxy keeps the answer. On
// shutdown, after the requests drained, it keeps sending what is pending for store.outbox.drainTimeout:
// a completion that lands then is stored; what cannot land (no spool here: a store URL) is one
// error line naming it.
import { randomBytes } from 'node:crypto';
import { until } from '../support/eventually';
import { postJson } from '../support/http';
import { PgNode, pgClusterUnavailable } from '../support/pg-cluster';
import { startProxy, type TestProxy, uniqueTable } from '../support/proxy';
import { describeUnless } from '../support/run-report';
import { sleep, startUpstream, type TestUpstream } from '../support/upstream';

let node: PgNode;
let upstream: TestUpstream;
/** Opens the upstream's answers, which wait for it. */
let openGate: () => void = () => undefined;
let gate = Promise.resolve();

describeUnless(pgClusterUnavailable(), 'pending writes at shutdown')(
  'pending writes at shutdown',
  () => {
    beforeAll(async () => {
      node = await PgNode.init('drain');
      await node.start();
      upstream = await startUpstream(async (req, res) => {
        await gate;
        res.writeHead(201, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ key: req.headers['idempotency-key'] }));
      });
    }, 120_000);
    afterAll(async () => {
      await upstream?.close();
      await node?.dispose();
    });

    const table = uniqueTable('drain');
    const proxyWith = (drainTimeout: string): Promise<TestProxy> =>
      startProxy({
        databaseUrl: node.url,
        table,
        yaml: `
store: { table: "\${TEST_TABLE}", outbox: { holdAnswer: 300ms, drainTimeout: ${drainTimeout} } }
upstreams: { api: { url: ${upstream.url} } }
routes:
  - { name: orders, match: { method: POST, path: /orders }, upstream: api, idempotency: {} }
`,
      });

    /** Sends `key`, stops PostgreSQL while the upstream works on it, then lets the upstream answer. */
    async function answeredWhileDown(proxy: TestProxy, key: string) {
      gate = new Promise((resolve) => (openGate = resolve));
      const answer = postJson(`${proxy.url}/orders`, key, { key });
      await until(
        () => upstream.executions().some((r) => r.headers['idempotency-key'] === key),
        'the forward',
      );
      await node.stop('fast');
      openGate();
      return answer;
    }

    const rowOf = async (key: string) =>
      (
        await node.query<{ state: string; status: number | null }>(
          `SELECT state, status FROM ${table} WHERE key = $1`,
          [key],
        )
      )[0];

    test('an answer whose completion failed is sent to the client, kept, and stored by the drain once PostgreSQL is back', async () => {
      const proxy = await proxyWith('30s');
      const key = `drained-${randomBytes(4).toString('hex')}`;
      const answer = await answeredWhileDown(proxy, key);
      expect(answer.status).toBe(201);
      await until(
        () => proxy.logs.find((line) => line.msg === 'request' && line.key === key),
        'the log line',
      );
      expect(proxy.logs.find((line) => line.msg === 'request' && line.key === key)).toMatchObject({
        outcome: 'executed',
        landing: 'queued',
      });
      expect(proxy.store.pendingWrites.writes).toBe(1);
      const closing = proxy.close();
      await sleep(300);
      await node.start();
      await closing;
      expect(await rowOf(key)).toEqual({ state: 'completed', status: 201 });
      expect(proxy.logs.map((line) => line.msg)).toContain(
        'store: a failed completion landed on a retry',
      );
    }, 60_000);

    test('what the drain cannot land is logged as one error line naming it', async () => {
      const proxy = await proxyWith('500ms');
      const key = `left-${randomBytes(4).toString('hex')}`;
      expect((await answeredWhileDown(proxy, key)).status).toBe(201);
      await proxy.close();
      const lines = proxy.logs.filter((entry) =>
        String(entry.msg).startsWith('shutdown: a pending completion could not be stored'),
      );
      expect(lines).toEqual([
        expect.objectContaining({
          level: 50,
          operation: 'complete',
          scope: 'orders',
          key: expect.stringMatching(/^sha256:/),
          drainTimeoutMs: 500,
        }),
      ]);
      await node.start();
      // Nothing stored it: its claim stays in progress until the lease ends.
      expect(await rowOf(key)).toEqual({ state: 'in_progress', status: null });
    }, 60_000);
  },
);
