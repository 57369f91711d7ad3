// Storms of fresh keys, a third of them sent to two instances at once, while PostgreSQL is cut off
// under them: rounds of pg_terminate_backend with the server up, a restart (fast, and immediate: a
// crash), and the embedded postmaster killed with -9 under `serve` (its supervisor starts it again).
// Afterwards every key is retried: none ran twice upstream, every key whose first client got a 2xx
// replays that same answer (completions whose statement failed were sent again until they landed),
// and no key that never ran upstream is answered `Idempotency-Outcome: unknown` (a claim whose reply
// was lost was released by its token). The figures per storm go to the run report.
import { runningPostmaster } from '../../src/embedded/embedded-state';
import { findFreePort } from '../../src/embedded/embedded';
import { startServe } from '../support/cli-process';
import { embeddedFixture } from '../support/embedded-fixture';
import {
  expectNothingLost,
  runStorm,
  startCountingUpstream,
  STORM_LEASE_MS,
  STORM_ROUTE,
  stormOver,
  stormYaml,
  type StormFigures,
} from '../support/fault-storm';
import { send } from '../support/http';
import { PgNode, pgClusterUnavailable } from '../support/pg-cluster';
import { startProxy, type TestProxy, uniqueTable } from '../support/proxy';
import { describeUnless } from '../support/run-report';
import { sleep } from '../support/upstream';

let upstream: Awaited<ReturnType<typeof startCountingUpstream>>;
beforeAll(async () => {
  upstream = await startCountingUpstream();
});
afterAll(() => upstream?.close());

describeUnless(pgClusterUnavailable(), 'fault storms on a PostgreSQL of their own')(
  'two instances on one PostgreSQL of the test’s own',
  () => {
    let node: PgNode;
    let proxies: TestProxy[] = [];

    beforeAll(async () => {
      node = await PgNode.init('storms');
      await node.start();
      const table = uniqueTable('storm');
      const yaml = stormYaml(upstream.url);
      for (let i = 0; i < 2; i++)
        proxies.push(await startProxy({ yaml, table, databaseUrl: node.url }));
    }, 120_000);

    afterAll(async () => {
      for (const proxy of proxies) await proxy.close();
      proxies = [];
      await node?.dispose();
    });

    const storm = (name: string, fault: () => Promise<void>): Promise<StormFigures> =>
      stormOver(upstream, proxies, name, fault);

    /** Every session of the proxies' database but the one asking: the store's and the listeners'. */
    const terminateAll = (): Promise<unknown> =>
      node.query(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
          WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()`,
      );

    test('ten rounds of pg_terminate_backend with the server up', async () => {
      const figures = await storm('terminate', async () => {
        for (let round = 0; round < 10; round++) {
          await terminateAll();
          await sleep(150);
        }
      });
      expectNothingLost(__filename, 'pg_terminate_backend x10', figures);
    }, 120_000);

    test('pg_ctl restart -m fast', async () => {
      const figures = await storm('fast', async () => {
        await node.stop('fast');
        await node.start();
      });
      expectNothingLost(__filename, 'restart -m fast', figures);
    }, 120_000);

    test('pg_ctl restart -m immediate (a crash: no shutdown checkpoint)', async () => {
      const figures = await storm('immediate', async () => {
        await node.stop('immediate');
        await node.start();
      });
      expectNothingLost(__filename, 'restart -m immediate', figures);
    }, 120_000);
  },
);

describe('serve on the embedded PostgreSQL', () => {
  const fixture = embeddedFixture(
    'storm-embedded',
    (dataDir) => `listen: { host: 127.0.0.1, port: "\${PROXY_PORT}" }
admin: { host: 127.0.0.1, port: "\${ADMIN_PORT}" }
store: { dataDir: ${dataDir} }
upstreams: { api: { url: ${upstream.url}, timeout: 1s } }
routes:${STORM_ROUTE}
`,
  );

  test('kill -9 of the embedded postmaster, which the supervisor restarts', async () => {
    const port = await findFreePort();
    const adminPort = await findFreePort();
    const proxy = await startServe(['--config', fixture.configFile], {
      env: { DATABASE_URL: '', PROXY_PORT: String(port), ADMIN_PORT: String(adminPort) },
    });
    fixture.running.push(proxy);
    const url = `http://127.0.0.1:${port}`;
    const pendingWrites = async (): Promise<number> => {
      const metrics = await send(`http://127.0.0.1:${adminPort}/metrics`, { method: 'GET' });
      const line = /^idempotency_proxy_store_pending_writes (\d+)/m.exec(metrics.text());
      return Number(line?.[1] ?? NaN);
    };
    const figures = await runStorm(upstream, {
      // One instance: a duplicated key is sent to it twice at once.
      urls: [url, url],
      path: '/orders',
      name: 'kill9',
      fault: async () => {
        const postmaster = runningPostmaster(fixture.dataDir)!;
        process.kill(postmaster.pid, 'SIGKILL');
        await proxy.waitFor('embedded PostgreSQL restarted');
      },
      settled: async () => (await pendingWrites()) === 0,
      leaseMs: STORM_LEASE_MS + 500,
      metrics: async () => [
        (await send(`http://127.0.0.1:${adminPort}/metrics`, { method: 'GET' })).text(),
      ],
    });
    expectNothingLost(__filename, 'embedded postmaster kill -9', figures);
  }, 120_000);
});
