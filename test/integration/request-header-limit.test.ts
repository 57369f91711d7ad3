// Security regression: an upstream takes a bounded number of header lines — Node's http server
// (24 and 26) refuses a request with more than 1,000 (431), unless its maxHeadersCount says
// otherwise, and servers set up to drop the surplus lose the last lines — while the proxy forwards
// the client's lines and adds its own: X-Forwarded-For/-Host/-Proto, the Idempotency-Key it
// forwards (last), trace headers. A client just under the proxy's own parser limit pushed the
// request past the upstream's, and the key with it. The proxy now refuses more than
// listen.maxRequestHeaders lines with 431 and forwards nothing; at the limit, the upstream receives
// the key intact. Raw sockets, so every line goes out as written.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expectProblem } from '../support/edge-expect';
import { type HeaderLines, rawRequest } from '../support/edge-raw';
import { runCli } from '../support/cli-process';
import { proxyInFrontOf } from '../support/proxy';
import { startUpstream } from '../support/upstream';

const LIMIT = 24;
const limited = proxyInFrontOf(
  () => startUpstream(),
  (upstream) => `
listen: { maxRequestHeaders: ${LIMIT} }
upstreams: { api: { url: ${upstream.url} } }
routes:
  - { name: refunds, match: { method: POST, path: /refunds }, upstream: api, idempotency: {} }
  - { name: rest, match: { path: /** }, upstream: api }
`,
);
const byDefault = proxyInFrontOf(
  () => startUpstream(),
  (upstream) => `
upstreams: { api: { url: ${upstream.url} } }
routes:
  - { name: refunds, match: { method: POST, path: /refunds }, upstream: api, idempotency: {} }
`,
);

/**
 * `count` header lines in all, counting the Host line rawRequest puts first and the key. Filler
 * names are short (`2je`) and values empty, so 999 lines stay under Node's 16 KB header size.
 */
function linesWithKey(count: number, key: string): HeaderLines {
  const lines: [string, string][] = [['Content-Type', 'application/json']];
  // Host + Content-Type + Content-Length (added by rawRequest for the body) + the key = 4 lines.
  for (let i = 0; lines.length < count - 3; i++) lines.push([(1296 + i).toString(36), '']);
  lines.push(['Idempotency-Key', key]); // last: the line an upstream would drop first
  return lines;
}

const post = (port: number, target: string, headers: HeaderLines) =>
  rawRequest(port, { target, headers, body: '{"amount":1}' });

describe.each([
  ['a protected route', '/refunds'],
  ['a pass-through route', '/anything'],
])('on %s', (_, target) => {
  test('one line over listen.maxRequestHeaders: 431 problem+json, nothing forwarded', async () => {
    const { proxy, upstream } = limited;
    const before = upstream.received.length;
    const res = await post(proxy.port, target, linesWithKey(LIMIT + 1, `over-${target}`));
    expectProblem(res, 431, 'REQUEST_HEADERS_TOO_MANY');
    expect(res.json<{ detail: string }>().detail).toBe(
      `The request has ${LIMIT + 1} header lines; this proxy accepts at most ${LIMIT} (listen.maxRequestHeaders). Send fewer headers.`,
    );
    expect(upstream.received.length).toBe(before);
  });

  test('exactly at the limit: forwarded, the upstream receives the key as sent', async () => {
    const { proxy, upstream } = limited;
    const key = `at-limit-${target}-${Date.now()}`;
    const res = await post(proxy.port, target, linesWithKey(LIMIT, key));
    expect(res.status).toBe(201);
    const received = upstream.received.filter((r) => r.headers['idempotency-key'] === key);
    expect(received).toHaveLength(1);
    const names = received[0]!.rawHeaders.filter((_, i) => i % 2 === 0).map((n) => n.toLowerCase());
    expect(names.filter((n) => /^[0-9][0-9a-z]*$/.test(n))).toHaveLength(LIMIT - 4);
    expect(names).toContain('x-forwarded-for');
  });
});

test("the default limit (100) refuses 999 lines, which the proxy's own parser takes and a Node upstream would not with the proxy's lines added", async () => {
  const { proxy, upstream } = byDefault;
  const res = await post(proxy.port, '/refunds', linesWithKey(999, 'hidden-key'));
  expectProblem(res, 431, 'REQUEST_HEADERS_TOO_MANY');
  const atDefault = await post(proxy.port, '/refunds', linesWithKey(100, 'default-limit'));
  expect(atDefault.status).toBe(201);
  expect(upstream.received.map((r) => r.headers['idempotency-key'])).toEqual(['default-limit']);
});

test('a websocket upgrade over the limit gets the same 431, on the raw socket', async () => {
  const { proxy, upstream } = limited;
  const before = upstream.received.length;
  const headers: [string, string][] = [
    ['Connection', 'Upgrade'],
    ['Upgrade', 'websocket'],
    ['Sec-WebSocket-Version', '13'],
    ['Sec-WebSocket-Key', 'dGhlIHNhbXBsZSBub25jZQ=='],
  ];
  for (let i = 0; headers.length < LIMIT; i++) headers.push([`X-Filler-${i}`, String(i)]);
  const res = await rawRequest(proxy.port, { method: 'GET', target: '/socket', headers });
  expectProblem(res, 431, 'REQUEST_HEADERS_TOO_MANY');
  expect(upstream.received.length).toBe(before);
});

describe('listen.maxRequestHeaders in the config', () => {
  let dir: string;
  beforeAll(() => (dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ip-header-limit-'))));
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  test.each([
    ['501', 'expected a number of header lines from 16 to 500'],
    ['0', 'expected a number of header lines from 16 to 500'],
    ['many', 'expected a number of header lines from 16 to 500'],
  ])('%s: exit 2 naming file:line and the allowed range', async (value, message) => {
    const file = path.join(dir, `limit-${value}.yaml`);
    fs.writeFileSync(
      file,
      `upstreams: { api: { url: "http://127.0.0.1:4000" } }
listen:
  port: 8080
  maxRequestHeaders: ${value}
routes:
  - { name: jobs, match: { method: POST, path: /jobs }, upstream: api, idempotency: {} }
`,
    );
    const result = await runCli(['check', '--config', file]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(`${file}:4:22 listen.maxRequestHeaders: ${message}`);
  });
});
