// Routes scoped by a verified claim (tenant: [jwt:sub], auth.jwt): a refreshed token with the same
// principal is the same scope, so a retry after a timeout replays instead of running again; a token
// that does not verify is refused 401 and never forwarded; the key set is fetched, cached, and
// fetched again only for a kid it lacks.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { eventually } from '../support/eventually';
import { postJson, send, type TestResponse } from '../support/http';
import { postRawMcp } from '../support/mcp-raw-post';
import { startProxy, type TestProxy } from '../support/proxy';
import {
  AUDIENCE,
  ISSUER,
  type JwksServer,
  type SigningKey,
  signingKey,
  startJwksServer,
  token,
} from '../support/token-issuer';
import { startUpstream, type TestUpstream } from '../support/upstream';

let upstream: TestUpstream;
let jwks: JwksServer;
let proxy: TestProxy;
let rsa: SigningKey;
let ec: SigningKey;
let rotated: SigningKey;

const routeYaml = (jwksSource: string, extra = ''): string => `
store:
  table: \${TEST_TABLE}
upstreams: { api: { url: ${upstream.url} } }
auth:
  jwt:
    jwks: ${jwksSource}
    issuer: ${ISSUER}
    audience: ${AUDIENCE}
    algorithms: [RS256, ES256]
${extra}
routes:
  - name: refunds
    match: { path: /refunds }
    upstream: api
    idempotency: { tenant: [jwt:sub] }
  - name: tools
    match: { path: /mcp }
    upstream: api
    idempotency: { tenant: [jwt:sub], mcp: {} }
  - name: trial
    match: { path: /trial }
    upstream: api
    idempotency: { tenant: [jwt:sub], enforce: false }
  - name: orgs
    match: { path: /orgs }
    upstream: api
    idempotency: { tenant: ["jwt:https://example.com/org", header:x-team] }
`;

beforeAll(async () => {
  [rsa, ec, rotated] = await Promise.all([
    signingKey('rsa-1', 'RS256'),
    signingKey('ec-1', 'ES256'),
    signingKey('ec-2', 'ES256'),
  ]);
  upstream = await startUpstream();
  jwks = await startJwksServer([rsa, ec]);
  // cooldown 0s: a token with a kid the set lacks fetches it again at once (the rotation test).
  proxy = await startProxy({ yaml: routeYaml(jwks.url, '    cooldown: 0s') });
});

afterAll(async () => {
  await proxy?.close();
  await jwks?.close();
  await upstream?.close();
});

beforeEach(() => {
  upstream.received.length = 0;
});

const bearer = (jwt: string) => ({ authorization: `Bearer ${jwt}` });

function expectRefused(response: TestResponse, detail: RegExp): void {
  expect(response.status).toBe(401);
  expect(response.headers['content-type']).toBe('application/problem+json');
  expect(response.headers['www-authenticate']).toMatch(/^Bearer error="invalid_token"/);
  expect(response.json()).toMatchObject({ code: 'AUTH_TOKEN_INVALID', route: 'refunds' });
  expect(response.json<{ detail: string }>().detail).toMatch(detail);
}

test('fetches the key set once when the runtime starts, and not again for each request', async () => {
  await eventually(() => expect(jwks.fetches()).toBe(1));
  for (let n = 0; n < 10; n++) {
    const jwt = await token(n % 2 === 0 ? rsa : ec, { sub: `agent-fetch-${n}` });
    const answer = await postJson(`${proxy.url}/refunds`, `fetch-${n}`, { n }, bearer(jwt));
    expect(answer.status).toBe(201);
  }
  expect(jwks.fetches()).toBe(1);
  expect(upstream.executions()).toHaveLength(10);
});

test.each([
  ['RS256', () => rsa],
  ['ES256', () => ec],
])(
  'a retry with a refreshed %s token of the same subject replays: the upstream ran once',
  async (alg, key) => {
    const sub = `agent-refresh-${alg}`;
    const first = await token(key(), { sub, scope: 'refunds' });
    const refreshed = await token(key(), { sub, scope: 'refunds' }, { expiresIn: 600 });
    expect(refreshed).not.toBe(first);
    const body = { order: 'ord_42', amount: 4999 };
    const original = await postJson(`${proxy.url}/refunds`, `refund-${alg}`, body, bearer(first));
    const retry = await postJson(`${proxy.url}/refunds`, `refund-${alg}`, body, bearer(refreshed));
    expect(original.status).toBe(201);
    expect(retry.status).toBe(201);
    expect(retry.headers['idempotent-replayed']).toBe('true');
    expect(retry.text()).toBe(original.text());
    expect(upstream.executions()).toHaveLength(1);
    // The token reaches the upstream as sent: the proxy only reads it.
    expect(upstream.executions()[0]!.headers.authorization).toBe(`Bearer ${first}`);
  },
);

test('another subject with the same key is another scope: it runs', async () => {
  const body = { order: 'ord_7' };
  await postJson(`${proxy.url}/refunds`, 'shared', body, bearer(await token(rsa, { sub: 'a' })));
  const other = await postJson(
    `${proxy.url}/refunds`,
    'shared',
    body,
    bearer(await token(rsa, { sub: 'b' })),
  );
  expect(other.headers['idempotent-replayed']).toBeUndefined();
  expect(upstream.executions()).toHaveLength(2);
});

test.each([
  ['expired', { expiresIn: -120 }, {}, /expired/],
  ['for another audience', { audience: 'billing-api' }, {}, /"aud" claim/],
  ['from another issuer', { issuer: 'https://evil.test/' }, {}, /"iss" claim/],
  ['without the claim the route scopes by', {}, { sub: undefined }, /no "sub" claim/],
] as const)(
  'a token %s is refused 401 and nothing is forwarded',
  async (_, options, claims, why) => {
    const jwt = await token(rsa, { sub: 'agent-x', ...claims }, options);
    const answer = await postJson(`${proxy.url}/refunds`, 'refused-1', { a: 1 }, bearer(jwt));
    expectRefused(answer, why);
    expect(upstream.received).toHaveLength(0);
  },
);

test('a token signed by a key the issuer never published is refused, under a known kid or another', async () => {
  const stranger = await signingKey('rsa-1', 'RS256');
  const forged = await token(stranger, { sub: 'agent-x' });
  expectRefused(
    await postJson(`${proxy.url}/refunds`, 'forged', {}, bearer(forged)),
    /signature does not verify/,
  );
  const unknown = await token(stranger, { sub: 'agent-x' }, { kid: 'never-published' });
  expectRefused(
    await postJson(`${proxy.url}/refunds`, 'forged', {}, bearer(unknown)),
    /key the issuer's key set does not hold/,
  );
  expect(upstream.received).toHaveLength(0);
});

test('no token, another scheme, a malformed token or two Authorization lines: 401, nothing forwarded', async () => {
  const jwt = await token(rsa, { sub: 'agent-x' });
  const cases: Record<string, string | string[]>[] = [
    {},
    { authorization: 'Basic YWxpY2U6c2VjcmV0' },
    { authorization: 'Bearer not.a.jwt' },
    { authorization: [`Bearer ${jwt}`, `Bearer ${jwt}`] },
  ];
  for (const headers of cases) {
    const answer = await send(`${proxy.url}/refunds`, {
      headers: { 'content-type': 'application/json', 'idempotency-key': 'bad-auth', ...headers },
      body: '{}',
    });
    expectRefused(answer, /./);
  }
  expect(upstream.received).toHaveLength(0);
});

test('a namespaced claim and a header scope together; a refreshed token keeps the scope', async () => {
  const claims = { sub: 'someone', 'https://example.com/org': 'org_1' };
  const team = { 'x-team': 'payments' };
  const one = await token(ec, { ...claims, sub: 'agent-1' });
  const two = await token(rsa, { ...claims, sub: 'agent-2' });
  await postJson(`${proxy.url}/orgs`, 'org-key', { a: 1 }, { ...bearer(one), ...team });
  const sameOrg = await postJson(
    `${proxy.url}/orgs`,
    'org-key',
    { a: 1 },
    { ...bearer(two), ...team },
  );
  expect(sameOrg.headers['idempotent-replayed']).toBe('true');
  const otherTeam = await postJson(
    `${proxy.url}/orgs`,
    'org-key',
    { a: 1 },
    {
      ...bearer(two),
      'x-team': 'risk',
    },
  );
  expect(otherTeam.headers['idempotent-replayed']).toBeUndefined();
  expect(upstream.executions()).toHaveLength(2);
});

test('a rotated key: a token with the new kid fetches the set again once, then verifies from the cache', async () => {
  const before = jwks.fetches();
  jwks.publish([rsa, ec, rotated]);
  const fresh = await token(rotated, { sub: 'agent-rotated' });
  const first = await postJson(`${proxy.url}/refunds`, 'rotated-1', { r: 1 }, bearer(fresh));
  expect(first.status).toBe(201);
  expect(jwks.fetches()).toBe(before + 1);
  const again = await token(rotated, { sub: 'agent-rotated' });
  const retry = await postJson(`${proxy.url}/refunds`, 'rotated-1', { r: 1 }, bearer(again));
  expect(retry.headers['idempotent-replayed']).toBe('true');
  expect(jwks.fetches()).toBe(before + 1);
  expect(upstream.executions()).toHaveLength(1);
});

test('on an MCP route a tool call with a token that does not verify is HTTP 401, not forwarded; a valid one runs', async () => {
  const call = Buffer.from(
    JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'tools/call',
      params: { name: 'refund', arguments: { order: 'o-1' }, idempotencyKey: 'mcp-auth' },
    }),
  );
  const refused = await postRawMcp(`${proxy.url}/mcp`, call, { authorization: 'Bearer tenant-a' });
  expect(refused.status).toBe(401);
  expect(refused.headers['www-authenticate']).toMatch(/^Bearer error="invalid_token"/);
  expect(refused.json).toMatchObject({ code: 'AUTH_TOKEN_INVALID', route: 'tools' });
  expect(upstream.received).toHaveLength(0);
  const jwt = await token(ec, { sub: 'agent-mcp' });
  await postRawMcp(`${proxy.url}/mcp`, call, bearer(jwt));
  expect(upstream.received).toHaveLength(1);
});

test('in shadow mode a token that does not verify is forwarded, and the log says it would have been refused', async () => {
  const answer = await postJson(`${proxy.url}/trial`, 'trial-1', {}, { authorization: 'Bearer x' });
  expect(answer.status).toBe(201);
  expect(upstream.executions()).toHaveLength(1);
  expect(proxy.logs).toContainEqual(
    expect.objectContaining({ route: 'trial', shadow: 'would_reject_unauthorized' }),
  );
});

describe('keys from a file', () => {
  let fileProxy: TestProxy;
  let dir: string;

  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'jwks-'));
    const file = path.join(dir, 'jwks.json');
    fs.writeFileSync(file, JSON.stringify({ keys: [ec.jwk] }));
    fileProxy = await startProxy({ yaml: routeYaml(file) });
  });

  afterAll(async () => {
    await fileProxy?.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  test('verifies tokens with the file’s keys and refuses the others', async () => {
    const sub = 'agent-file';
    const body = { order: 'ord_file' };
    const first = await postJson(
      `${fileProxy.url}/refunds`,
      'file-1',
      body,
      bearer(await token(ec, { sub })),
    );
    const retry = await postJson(
      `${fileProxy.url}/refunds`,
      'file-1',
      body,
      bearer(await token(ec, { sub })),
    );
    expect(first.status).toBe(201);
    expect(retry.headers['idempotent-replayed']).toBe('true');
    const notInFile = await token(rsa, { sub });
    expect(
      (await postJson(`${fileProxy.url}/refunds`, 'file-2', body, bearer(notInFile))).status,
    ).toBe(401);
    expect(upstream.executions()).toHaveLength(1);
  });
});

describe('keys that cannot be fetched', () => {
  let blindProxy: TestProxy;
  let gone: JwksServer;

  beforeAll(async () => {
    gone = await startJwksServer([rsa]);
    const url = gone.url;
    await gone.close();
    blindProxy = await startProxy({ yaml: routeYaml(url) });
  });

  afterAll(async () => {
    await blindProxy?.close();
  });

  test('a valid token is answered 503 AUTH_KEYS_UNAVAILABLE with Retry-After, and nothing is forwarded', async () => {
    const jwt = await token(rsa, { sub: 'agent-blind' });
    const answer = await postJson(`${blindProxy.url}/refunds`, 'blind-1', {}, bearer(jwt));
    expect(answer.status).toBe(503);
    expect(answer.headers['retry-after']).toBe('1');
    expect(answer.json()).toMatchObject({ code: 'AUTH_KEYS_UNAVAILABLE', route: 'refunds' });
    expect(upstream.received).toHaveLength(0);
  });
});
