// Operator commands against a running proxy process: inspect and prune, and SIGHUP reload with a valid
// and an invalid config under traffic (no request lost, the invalid one rejected with its errors).
import fs from 'node:fs';
import { postJson, send, type TestResponse } from '../support/http';
import { databaseUrl, uniqueTable } from '../support/proxy';
import { eventually } from '../support/eventually';
import { type CliResult, runCli } from '../support/cli-process';
import { type ProxyProcess, startProxyProcess } from '../support/proxy-process';
import { sleep, startUpstream, type TestUpstream } from '../support/upstream';

let upstream: TestUpstream;
let proxy: ProxyProcess;
const table = uniqueTable('ops');

const config = (extraRoute = '', ttl = '24h'): string => `
listen:
  host: 127.0.0.1
  port: \${PROXY_PORT}
admin:
  port: \${ADMIN_PORT}
store:
  table: ${table}
upstreams: { api: { url: ${upstream.url} }, slow: { url: ${upstream.url}, timeout: 300ms } }
routes:
  - { name: charges, match: { path: /charges }, upstream: slow, idempotency: { unknownOutcome: fail } }
  - { name: orders, match: { path: /orders }, upstream: api, idempotency: { ttl: ${ttl}, tenant: [header:x-org] } }
${extraRoute}  - { name: rest, match: { path: /** }, upstream: api }
`;

beforeAll(async () => {
  upstream = await startUpstream(async (req, res) => {
    await sleep(Number(req.headers['x-wait'] ?? 0));
    res.writeHead(201, { 'content-type': 'text/plain' });
    res.end(`done ${req.url} ${upstream.executions().length}`);
  });
  proxy = await startProxyProcess({ yaml: config(), env: { DATABASE_URL: databaseUrl() } });
}, 60_000);

afterAll(async () => {
  await proxy?.kill();
  await upstream?.close();
});

function cli(args: string[]): Promise<CliResult> {
  return runCli([...args, '--config', proxy.configFile], {
    env: { DATABASE_URL: databaseUrl(), PROXY_PORT: '1', ADMIN_PORT: '2', LOG_FORMAT: 'json' },
  });
}

test('inspect prints a record with its counters and history, and agrees with DELETE /keys', async () => {
  await postJson(`${proxy.url}/orders`, 'inspect-1', { a: 1 }, { 'x-org': 'acme' });
  await postJson(`${proxy.url}/orders`, 'inspect-1', { a: 1 }, { 'x-org': 'acme' });
  // The repeat's counters reach the row with the next replay-cache flush (every 1 s).
  const byKey = await eventually(async () => {
    const result = await cli(['inspect', 'inspect-1']);
    expect(result.stdout).toMatch(/attempts\s+2 \(requests seen\), replays 1, fence 1/);
    return result;
  });
  expect(byKey.code).toBe(0);
  expect(byKey.stdout).toContain('key "inspect-1"  scope orders');
  expect(byKey.stdout).toMatch(/claimed\s+fence 1/);
  expect(byKey.stdout).toMatch(/completed\s+fence 1\s+status 201/);
  const exact = await cli([
    'inspect',
    'inspect-1',
    '--route',
    'orders',
    '--tenant',
    'acme',
    '--body',
  ]);
  expect(exact.code).toBe(0);
  expect(exact.stdout).toContain('body (utf8): done /orders');
  expect((await cli(['inspect', 'inspect-1', '--route', 'orders', '--tenant', 'other'])).code).toBe(
    1,
  );
  expect((await cli(['inspect', 'inspect-1', '--route', 'nope'])).code).toBe(2);
  expect((await cli(['inspect'])).code).toBe(2);
});

test('prune deletes expired records and reports how many', async () => {
  await postJson(`${proxy.url}/orders`, 'prune-me', {}, { 'x-org': 'acme' });
  const { Client } = await import('pg');
  const client = new Client({ connectionString: databaseUrl() });
  await client.connect();
  await client.query(
    `UPDATE "${table}" SET expires_at = now() - interval '1 second', prune_after = now() - interval '1 second'
     WHERE key = 'prune-me'`,
  );
  await client.end();
  const result = await cli(['prune']);
  expect(result.code).toBe(0);
  expect(JSON.parse(result.stdout)).toMatchObject({ deleted: 1, skipped: false });
  expect((await cli(['inspect', 'prune-me'])).code).toBe(1);
});

test('clear: an unknown outcome (an upstream timeout) is cleared from the CLI, and the next request executes', async () => {
  const executions = () =>
    upstream.executions().filter((r) => r.headers['idempotency-key'] === 'charge-1').length;
  // undici's timers fire up to ~1 s late (more under load): the upstream answers well after that.
  const timedOut = await postJson(`${proxy.url}/charges`, 'charge-1', {}, { 'x-wait': '4000' });
  expect(timedOut.status).toBe(504);
  expect(timedOut.headers['idempotency-outcome']).toBe('unknown');
  const repeat = await postJson(`${proxy.url}/charges`, 'charge-1', {});
  expect(repeat.status).toBe(504); // the stored unknown outcome, not a second execution
  expect(executions()).toBe(1);

  const cleared = await cli(['clear', 'charges', 'charge-1']);
  expect(cleared.code).toBe(0);
  expect(cleared.stdout).toBe('cleared key "charge-1" on charges: its next request executes\n');
  const [logged] = cleared.stderr
    .split('\n')
    .filter((line) => line.includes('admin: cleared a record'))
    .map((line) => JSON.parse(line) as Record<string, unknown>);
  expect(logged).toMatchObject({ admin: 'clear', via: 'cli', scope: 'charges', key: 'charge-1' });

  // The clear reaches the proxy's replay cache by NOTIFY, a moment after the CLI has exited: until
  // then a repeat may still be answered from memory.
  await eventually(async () =>
    expect((await postJson(`${proxy.url}/charges`, 'charge-1', {})).status).toBe(201),
  );
  expect(executions()).toBe(2);

  const nothing = await cli(['clear', 'charges', 'never-sent']);
  expect(nothing.code).toBe(1);
  expect(nothing.stderr).toContain('no record for key "never-sent" on charges: nothing to clear');
  const wrongRoute = await cli(['clear', 'nope', 'charge-1']);
  expect(wrongRoute.code).toBe(2);
  expect(wrongRoute.stderr).toContain(
    'no protected route or group named "nope"; the protected ones are: charges, orders',
  );
  // A tenanted route takes one --tenant per part.
  await postJson(`${proxy.url}/orders`, 'clear-tenant', {}, { 'x-org': 'acme' });
  expect((await cli(['clear', 'orders', 'clear-tenant', '--tenant', 'other'])).code).toBe(1);
  expect((await cli(['clear', 'orders', 'clear-tenant', '--tenant', 'acme'])).code).toBe(0);
});

test('SIGHUP reloads a valid config under traffic without losing a request, and rejects an invalid one', async () => {
  let stop = false;
  const results: (TestResponse | Error)[] = [];
  const traffic = (async () => {
    for (let i = 0; !stop; i++) {
      results.push(
        await postJson(`${proxy.url}/orders`, `reload-${i}`, {}, { 'x-org': 'acme' }).catch(
          (e: Error) => e,
        ),
      );
    }
  })();
  // Traffic under way before the first reload, and still answered after the last: counted, not
  // timed, so a slow machine only makes it take longer.
  await eventually(() => expect(results.length).toBeGreaterThan(2));
  expect((await send(`${proxy.url}/new-route`, { method: 'POST', body: 'x' })).text()).toContain(
    'done /new-route',
  );
  fs.writeFileSync(
    proxy.configFile,
    config('  - { name: added, match: { path: /new-route }, upstream: api, idempotency: {} }\n'),
  );
  proxy.child.kill('SIGHUP');
  await eventually(() => expect(proxy.output()).toContain('configuration reloaded'));
  const nowProtected = await send(`${proxy.url}/new-route`, { method: 'POST', body: 'x' });
  expect(nowProtected.status).toBe(400); // the added route requires a key

  fs.writeFileSync(proxy.configFile, `${config()}\nroutes: [oops`);
  proxy.child.kill('SIGHUP');
  await eventually(() =>
    expect(proxy.output()).toContain(
      'configuration reload rejected; keeping the running configuration',
    ),
  );
  expect((await send(`${proxy.url}/new-route`, { method: 'POST', body: 'x' })).status).toBe(400);

  // A setting only a restart can change is named as a field, not as its section.
  fs.writeFileSync(
    proxy.configFile,
    config().replace(`table: ${table}`, `table: ${table}\n  poolSize: 3`),
  );
  const before = proxy.output().length;
  proxy.child.kill('SIGHUP');
  await eventually(() => expect(proxy.output().slice(before)).toContain('reload rejected'));
  const rejected = proxy
    .output()
    .slice(before)
    .split('\n')
    .find((line) => line.includes('reload rejected'));
  expect((JSON.parse(rejected!) as { issues: string[] }).issues).toEqual([
    'these settings need a restart, not a reload: store.poolSize',
  ]);
  const beforeLastAnswers = results.length;
  await eventually(() => expect(results.length).toBeGreaterThan(beforeLastAnswers + 2));
  stop = true;
  await traffic;
  expect(results.every((r) => !(r instanceof Error) && r.status === 201)).toBe(true);
  expect(proxy.child.exitCode).toBeNull();
}, 60_000);
