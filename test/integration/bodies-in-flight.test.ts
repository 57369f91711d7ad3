// listen.maxBodyBytesInFlight: the request bodies a proxy holds at once are bounded. A request whose
// body does not fit is answered 503 before its body is read, and its retry with the same key, once
// room is free, executes once.
import { until } from '../support/eventually';
import { send, type TestResponse } from '../support/http';
import { startProxy, type TestProxy } from '../support/proxy';
import { startUpstream, type TestUpstream } from '../support/upstream';

let upstream: TestUpstream;
let proxy: TestProxy;
/** Upstream requests held until the test lets them go. */
const held: (() => void)[] = [];

beforeAll(async () => {
  upstream = await startUpstream(async (req, res) => {
    if (req.headers['x-hold']) await new Promise<void>((resolve) => held.push(resolve));
    res.writeHead(201, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ bytes: req.body.length }));
  });
  proxy = await startProxy({
    yaml: `
listen: { maxBodyBytesInFlight: 2mb }
upstreams: { api: { url: ${upstream.url} } }
routes:
  - { name: bulk, match: { path: /bulk }, upstream: api, idempotency: { maxRequestBytes: 1mb } }
  - { name: open, match: { path: /open }, upstream: api, idempotency: false }
`,
  });
});

afterAll(async () => {
  for (const release of held.splice(0)) release();
  await proxy?.close();
  await upstream?.close();
});

/** request_body_bytes_in_flight, as /metrics shows it. */
async function gauge(): Promise<number> {
  const text = await (await fetch(`${proxy.adminUrl}/metrics`)).text();
  const line = text
    .split('\n')
    .find((l) => l.startsWith('idempotency_proxy_request_body_bytes_in_flight '));
  if (line === undefined) throw new Error(`no request_body_bytes_in_flight in /metrics:\n${text}`);
  return Number(line.split(' ')[1]);
}

/** A JSON body of about `bytes` bytes. */
function bodyOf(bytes: number, seed: string): string {
  return JSON.stringify({ seed, pad: 'x'.repeat(bytes - 30) });
}

function post(key: string, body: string, extra: { hold?: boolean; chunked?: boolean } = {}) {
  return send(`${proxy.url}/bulk`, {
    headers: {
      'content-type': 'application/json',
      'idempotency-key': key,
      ...(extra.hold ? { 'x-hold': '1' } : {}),
    },
    body,
    ...(extra.chunked ? { chunked: true } : {}),
  });
}

test('past the bound a request is answered 503 unread, and its retry executes once room is free', async () => {
  const [bodyA, bodyB] = [bodyOf(800_000, 'a'), bodyOf(800_000, 'b')];
  const first = post('fill-1', bodyA, { hold: true });
  const second = post('fill-2', bodyB, { hold: true });
  await until(() => held.length === 2, 'both bodies to reach the upstream');

  // Each held body is counted at its Content-Length, and the gauge shows them.
  expect(await gauge()).toBe(Buffer.byteLength(bodyA) + Buffer.byteLength(bodyB));

  // 1.6 MB held: 800 kB more do not fit under 2 MB.
  const refused = await post('third', bodyOf(800_000, 'c'));
  expect(refused.status).toBe(503);
  expect(refused.headers['content-type']).toBe('application/problem+json');
  expect(refused.headers['retry-after']).toBe('1');
  expect(refused.headers.connection).toBe('close');
  const problem = refused.json<{ code: string; detail: string }>();
  expect(problem.code).toBe('BODIES_IN_FLIGHT_FULL');
  expect(problem.detail).toContain('listen.maxBodyBytesInFlight');
  expect(problem.detail).toContain('same key');

  // A chunked body may be as large as the route's limit (1 MB): it does not fit either.
  expect((await post('chunked', bodyOf(1_000, 'd'), { chunked: true })).status).toBe(503);
  // What reads no body whole is not counted: a small body that fits, a pass-through.
  expect((await post('small', bodyOf(300_000, 'e'))).status).toBe(201);
  const open = await send(`${proxy.url}/open`, { method: 'POST', body: bodyOf(900_000, 'f') });
  expect(open.status).toBe(201);
  expect(upstream.executions().filter((r) => r.url === '/bulk')).toHaveLength(3);

  for (const release of held.splice(0)) release();
  expect(((await first) as TestResponse).status).toBe(201);
  expect(((await second) as TestResponse).status).toBe(201);

  // The held bodies gave their room back: the refused requests' retries go through, once each.
  expect(await gauge()).toBe(0);
  const retried = await post('third', bodyOf(800_000, 'c'));
  expect(retried.status).toBe(201);
  expect((await post('third', bodyOf(800_000, 'c'))).headers['idempotent-replayed']).toBe('true');
  expect((await post('chunked', bodyOf(1_000, 'd'), { chunked: true })).status).toBe(201);
  const bulk = upstream.executions().filter((r) => r.url === '/bulk');
  expect(bulk.map((r) => r.headers['idempotency-key']).sort()).toEqual(
    ['chunked', 'fill-1', 'fill-2', 'small', 'third'].sort(),
  );
});

test('a body larger than the whole bound still goes through when nothing else is held', async () => {
  const proxyWithTinyBound = await startProxy({
    yaml: `
listen: { maxBodyBytesInFlight: 100kb }
upstreams: { api: { url: ${upstream.url} } }
routes:
  - { name: bulk, match: { path: /bulk }, upstream: api, idempotency: { maxRequestBytes: 1mb } }
`,
  });
  try {
    const answer = await send(`${proxyWithTinyBound.url}/bulk`, {
      headers: { 'content-type': 'application/json', 'idempotency-key': 'alone' },
      body: bodyOf(500_000, 'g'),
    });
    expect(answer.status).toBe(201);
  } finally {
    await proxyWithTinyBound.close();
  }
});
