// key.forward: what the upstream receives as its Idempotency-Key. raw (the default) is the key as
// sent, for every tenant, so two tenants that pick the same key meet at an upstream that dedupes on
// the header; scoped is a hash of scope, tenant and key, the same on every retry of one tenant's key
// and different across tenants and routes; none sends nothing.
import { rawRequest, type RawResponse } from '../support/edge-raw';
import { freshKey } from '../support/edge-refunds';
import { proxyInFrontOf } from '../support/proxy';
import { startUpstream } from '../support/upstream';

const ALICE = 'Bearer alice';
const BOB = 'Bearer bob';

/** Keys whose next request the upstream answers 503 (released by the proxy, so retried). */
const unavailableOnce = new Set<string>();

const route = (name: string, forward: string): string => `
  - name: ${name}
    match: { method: POST, path: /${name} }
    upstream: app
    idempotency:
      tenant: [header:authorization]
      key: { forward: ${forward} }`;

const running = proxyInFrontOf(
  () =>
    startUpstream((req, res) => {
      const marker = String(req.headers['x-test-marker'] ?? '');
      const busy = unavailableOnce.delete(marker);
      res.writeHead(busy ? 503 : 201, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ url: req.url }));
    }),
  (upstream) => `
store: { table: "\${TEST_TABLE}" }
upstreams:
  app: { url: ${upstream.url} }
routes:${route('raw', 'raw')}${route('scoped', 'scoped')}${route('scoped-too', 'scoped')}${route('none', 'none')}
`,
);

/** POSTs under `key` as `tenant` and returns the answer and the Idempotency-Key(s) upstream saw. */
async function send(
  path: string,
  tenant: string,
  key: string,
): Promise<{ res: RawResponse; forwarded: (string | undefined)[] }> {
  const marker = `${path}|${tenant}|${key}`;
  const before = running.upstream.received.length;
  const res = await rawRequest(running.proxy.port, {
    target: path,
    headers: [
      ['Content-Type', 'application/json'],
      ['Authorization', tenant],
      ['Idempotency-Key', key],
      ['X-Test-Marker', marker],
    ],
    body: '{"amount":1}',
  });
  const forwarded = running.upstream.received
    .slice(before)
    .map((r) => r.headers['idempotency-key'] as string | undefined);
  return { res, forwarded };
}

test('raw: the key as sent, the same for two tenants (an upstream that dedupes on it would merge them)', async () => {
  const key = freshKey('raw');
  const alice = await send('/raw', ALICE, key);
  const bob = await send('/raw', BOB, key);
  expect([alice.res.status, bob.res.status]).toEqual([201, 201]);
  expect(alice.forwarded).toEqual([key]);
  expect(bob.forwarded).toEqual([key]);
});

test('scoped: 64 hex, not the key; one per tenant; the same on a retry of one tenant and key', async () => {
  const key = freshKey('scoped');
  unavailableOnce.add(`/scoped|${ALICE}|${key}`);
  const first = await send('/scoped', ALICE, key);
  expect(first.res.status).toBe(503);
  // 503 is released: the retry is forwarded again, and must carry the same value.
  const retry = await send('/scoped', ALICE, key);
  expect(retry.res.status).toBe(201);
  const replay = await send('/scoped', ALICE, key);
  expect(replay.res.headers['idempotent-replayed']).toBe('true');
  expect(replay.forwarded).toEqual([]);
  const bob = await send('/scoped', BOB, key);
  const otherRoute = await send('/scoped-too', ALICE, key);

  const [value] = first.forwarded;
  expect(value).toMatch(/^[0-9a-f]{64}$/);
  expect(value).not.toContain(key);
  expect(retry.forwarded).toEqual([value]);
  expect(bob.forwarded).toHaveLength(1);
  expect(bob.forwarded[0]).toMatch(/^[0-9a-f]{64}$/);
  expect(bob.forwarded[0]).not.toBe(value);
  expect(otherRoute.forwarded).toHaveLength(1);
  expect(otherRoute.forwarded[0]).not.toBe(value);
  expect(otherRoute.forwarded[0]).not.toBe(bob.forwarded[0]);
});

test('scoped: another key of the same tenant gets another value', async () => {
  const a = await send('/scoped', ALICE, freshKey('scoped-a'));
  const b = await send('/scoped', ALICE, freshKey('scoped-b'));
  expect(a.forwarded).toHaveLength(1);
  expect(b.forwarded).toHaveLength(1);
  expect(a.forwarded[0]).not.toBe(b.forwarded[0]);
});

test('none: the upstream gets no Idempotency-Key, and the request is still protected', async () => {
  const key = freshKey('none');
  const first = await send('/none', ALICE, key);
  const again = await send('/none', ALICE, key);
  expect(first.res.status).toBe(201);
  expect(again.res.headers['idempotent-replayed']).toBe('true');
  expect(first.forwarded).toEqual([undefined]);
  expect(again.forwarded).toEqual([]);
  expect(running.upstream.received.at(-1)!.rawHeaders.map((h) => h.toLowerCase())).not.toContain(
    'idempotency-key',
  );
});
