// The replay cache is only as good as the clears its LISTEN connection hears, and a connection can
// fail without a word: a NAT or firewall that drops it leaves a half-open TCP that neither side
// notices for hours. Here instance a's listener reaches PostgreSQL through a forwarder the test
// freezes (its connections stop relaying, nothing is closed: what a silent network does; a
// pg_terminate_backend would not be silent). The periodic probe must turn a's cache off, /readyz
// must say so, a key cleared and executed again through instance b must not be replayed by a from
// memory, and once the path works again a successful probe turns the cache back on.
import net from 'node:net';
import { eventually } from '../support/eventually';
import { postJson, send } from '../support/http';
import { databaseUrl, startProxy, type TestProxy, uniqueTable } from '../support/proxy';
import { startTcpForwarder, type TcpForwarder } from '../support/tcp-forwarder';
import { startUpstream, type TestUpstream } from '../support/upstream';

const TOKEN = 'liveness-test-token';
let upstream: TestUpstream;
let forwarder: TcpForwarder;
let a: TestProxy;
let b: TestProxy;
let database: { host: string; port: number };

/** A port nothing listens on: connections to it are refused (a network still down). */
async function deadPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

beforeAll(async () => {
  upstream = await startUpstream((_req, res) => {
    res.writeHead(201, { 'content-type': 'text/plain' });
    res.end(`execution ${upstream.executions().length}`);
  });
  const url = new URL(databaseUrl());
  database = { host: url.hostname, port: Number(url.port || 5432) };
  forwarder = await startTcpForwarder(database);
  const throughForwarder = new URL(url);
  throughForwarder.hostname = '127.0.0.1';
  throughForwarder.port = String(forwarder.port);
  const table = uniqueTable('liveness');
  const yaml = `
admin:
  token: ${TOKEN}
store:
  table: ${table}
  listenProbeInterval: 300ms
  listenProbeTimeout: 1s
upstreams: { api: { url: ${upstream.url} } }
routes:
  - { name: orders, match: { path: /orders }, upstream: api, idempotency: {} }
`;
  a = await startProxy({ yaml, table, listenerDatabaseUrl: throughForwarder.toString() });
  b = await startProxy({ yaml, table });
});

afterAll(async () => {
  await a?.close();
  await b?.close();
  await forwarder?.close();
  await upstream?.close();
});

const lastLine = (proxy: TestProxy, key: string) =>
  proxy.logs.filter((l) => l.msg === 'request' && l.key === key).at(-1);

const replayCacheOf = async (proxy: TestProxy) =>
  (await send(`${proxy.adminUrl}/readyz`, { method: 'GET' })).json<{
    status: string;
    replayCache: { state: string; reason?: string; provenMsAgo?: number };
  }>();

test('a silent LISTEN connection turns the cache off within the probe period; a cleared key is not replayed from memory; a proven connection turns it back on', async () => {
  await eventually(async () => expect((await replayCacheOf(a)).replayCache.state).toBe('on'));
  const first = await postJson(`${a.url}/orders`, 'silent-1', {});
  await postJson(`${a.url}/orders`, 'silent-1', {}); // admitted
  const cached = await postJson(`${a.url}/orders`, 'silent-1', {});
  expect(lastLine(a, 'silent-1')).toMatchObject({ outcome: 'replayed', cached: true });
  expect(cached.body.equals(first.body)).toBe(true);

  // The path goes silent: the listener's connection stays open and relays nothing, and new
  // connections are refused until the network is back.
  forwarder.switchTo({ host: '127.0.0.1', port: await deadPort() });
  forwarder.hold();
  const off = await eventually(
    async () => {
      const ready = await replayCacheOf(a);
      expect(ready.replayCache.state).toBe('off');
      return ready;
    },
    { timeoutMs: 15_000, intervalMs: 50 },
  );
  // Shown, not failed: the instance still answers correctly, from the database.
  expect(off.status).toBe('ready');
  expect(off.replayCache.reason).toMatch(/probe|lost|LISTEN/);
  expect(a.cache!.live).toBe(false);
  expect(a.cache!.size).toBe(0);

  // Cleared and executed again through b, whose listener is fine …
  const cleared = await send(`${b.adminUrl}/keys/orders/silent-1`, {
    method: 'DELETE',
    headers: { authorization: `Bearer ${TOKEN}` },
  });
  expect(cleared.status).toBe(200);
  const again = await postJson(`${b.url}/orders`, 'silent-1', {});
  expect(again.headers['idempotent-replayed']).toBeUndefined();
  // … a answers what the database holds now, not what it had in memory.
  const fromA = await postJson(`${a.url}/orders`, 'silent-1', {});
  expect(fromA.headers['idempotent-replayed']).toBe('true');
  expect(fromA.text()).toBe(again.text());
  expect(fromA.text()).not.toBe(first.text());
  expect(lastLine(a, 'silent-1')?.cached).toBeUndefined();
  const stillOff = await replayCacheOf(a);
  expect(stillOff.replayCache.state).toBe('off');

  // The network is back: a new connection passes its proof, and the cache answers again.
  forwarder.switchTo(database);
  forwarder.drop();
  await eventually(async () => expect((await replayCacheOf(a)).replayCache.state).toBe('on'), {
    timeoutMs: 15_000,
    intervalMs: 50,
  });
  expect(a.listener.stats.probeFailures).toBeGreaterThan(0);
  await postJson(`${a.url}/orders`, 'silent-1', {}); // admitted again
  const cachedAgain = await postJson(`${a.url}/orders`, 'silent-1', {});
  expect(lastLine(a, 'silent-1')).toMatchObject({ outcome: 'replayed', cached: true });
  expect(cachedAgain.text()).toBe(again.text());
  expect(upstream.executions()).toHaveLength(2);
});

test("/readyz shows the replay cache's state", async () => {
  await eventually(async () => expect((await replayCacheOf(b)).replayCache.state).toBe('on'));
  const ready = await replayCacheOf(b);
  expect(ready.status).toBe('ready');
  expect(ready.replayCache.provenMsAgo).toBeGreaterThanOrEqual(0);
});
