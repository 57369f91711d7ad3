// The library entry as an embedding process uses it, through the package's index alone: a config
// parsed from text, createProxy → listen → protected requests against a real upstream (two sends,
// one execution) → reload → close; and the errors an embedder sees for a store it cannot reach.
import { createProxy, parseConfigText, type EmbeddedProxy } from '../../src/index';
import { postJson, send } from '../support/http';
import { databaseUrl, uniqueTable } from '../support/proxy';
import { startUpstream, type TestUpstream } from '../support/upstream';

let upstream: TestUpstream;
let proxy: EmbeddedProxy | undefined;

beforeAll(async () => {
  upstream = await startUpstream();
});

afterEach(async () => {
  await proxy?.close();
  proxy = undefined;
});

afterAll(async () => {
  await upstream?.close();
});

const TABLE = uniqueTable('embed');
const configText = (storeUrl: string, route = 'orders') => `
listen: { host: 127.0.0.1, port: 0 }
admin: { host: 127.0.0.1, port: 0 }
store: { url: "${storeUrl}", table: ${TABLE} }
upstreams:
  api: { url: ${upstream.url}, timeout: 5s }
routes:
  - { name: ${route}, match: { path: /orders }, upstream: api, idempotency: {} }
`;

test('createProxy, listen, two sends of one key run once, reload, close', async () => {
  const config = parseConfigText(configText(databaseUrl()), 'embedded.yaml');
  proxy = await createProxy(config);
  const { url, adminUrl } = await proxy.listen();
  expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
  const before = upstream.executions().length;
  const first = await postJson(`${url}/orders`, 'embed-1', { amount: 5 });
  const again = await postJson(`${url}/orders`, 'embed-1', { amount: 5 });
  expect(first.status).toBe(201);
  expect(again.status).toBe(201);
  expect(again.headers['idempotent-replayed']).toBe('true');
  expect(upstream.executions().length - before).toBe(1);
  expect((await send(`${adminUrl}/readyz`, { method: 'GET' })).status).toBe(200);

  proxy.reload(parseConfigText(configText(databaseUrl(), 'renamed'), 'embedded.yaml'));
  const renamed = await postJson(`${url}/orders`, 'embed-1', { amount: 5 });
  expect(renamed.headers['idempotent-replayed']).toBeUndefined(); // a new scope: a new record
  expect(upstream.executions().length - before).toBe(2);

  await proxy.close();
  await expect(send(`${url}/orders`, { method: 'GET' })).rejects.toThrow();
  await proxy.close(); // a second close is the first one's
});

test('a store that refuses connections is an error from createProxy that names its address', async () => {
  const config = parseConfigText(
    configText('postgres://nobody@127.0.0.1:1/none'),
    'embedded.yaml',
    {}, // no DATABASE_URL: it would override store.url
  );
  await expect(createProxy(config, { storeWaitMs: 0 })).rejects.toThrow(/127\.0\.0\.1:1/);
});
