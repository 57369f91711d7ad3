// HTTP `Prefer: respond-async` (RFC 7240) on a route with idempotency.async: a request the upstream
// is slow to answer gets 202 Accepted and a status monitor on the proxy, polled on any instance,
// scoped like the key; without the preference, or for a fast answer, nothing changes.
import { until } from '../support/eventually';
import { postJson, send, type TestResponse } from '../support/http';
import { databaseUrl, startProxy, type TestProxy, uniqueTable } from '../support/proxy';
import { startProxyProcess } from '../support/proxy-process';
import { sleep, startUpstream, type TestUpstream } from '../support/upstream';

let upstream: TestUpstream;

beforeAll(async () => {
  upstream = await startUpstream(async (req, res) => {
    // A caller that hung up (a killed proxy) ends the wait: no timer outlives the test.
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, Number(req.headers['x-wait'] ?? 0));
      res.once('close', () => {
        clearTimeout(timer);
        resolve();
      });
    });
    if (res.destroyed) return;
    res.writeHead(201, { 'content-type': 'application/json', 'x-report': 'ready' });
    res.end(JSON.stringify({ report: req.headers['idempotency-key'], rows: 42 }));
  });
});

afterAll(async () => {
  await upstream?.close();
});

const yaml = (lockTimeout = '30s'): string => `
upstreams: { reports: { url: ${upstream.url}, timeout: 20s } }
routes:
  - name: reports
    match: { path: /reports }
    upstream: reports
    idempotency:
      lockTimeout: ${lockTimeout}
      tenant: [header:x-tenant]
      async: { after: 300ms, pollInterval: 1s }
  - name: plain
    match: { path: /plain }
    upstream: reports
    idempotency: { tenant: [header:x-tenant] }
`;

const ASYNC = { prefer: 'respond-async', 'x-tenant': 'acme' };

function runs(key: string): number {
  return upstream.received.filter((r) => r.headers['idempotency-key'] === key).length;
}

function monitor(proxy: { url: string }, answer: TestResponse, tenant = 'acme') {
  return send(`${proxy.url}${answer.headers.location}`, {
    method: 'GET',
    headers: { 'x-tenant': tenant },
  });
}

/** The monitor's answer once the call is done (it stops saying 202). */
function settled(proxy: { url: string }, answer: TestResponse): Promise<TestResponse> {
  return until(
    async () => {
      const polled = await monitor(proxy, answer);
      return polled.status === 202 ? undefined : polled;
    },
    `the monitor ${answer.headers.location} to give the answer`,
    { timeoutMs: 15_000, intervalMs: 100 },
  );
}

describe('one proxy', () => {
  let proxy: TestProxy;
  beforeAll(async () => {
    proxy = await startProxy({ yaml: yaml() });
  });
  afterAll(async () => {
    await proxy?.close();
  });

  test('a slow call gets 202 and a monitor, which answers 202 while it runs and then its stored answer', async () => {
    const accepted = await postJson(
      `${proxy.url}/reports`,
      'slow-1',
      { month: 11 },
      {
        ...ASYNC,
        'x-wait': '2000',
      },
    );
    expect(accepted.status).toBe(202);
    expect(accepted.headers['preference-applied']).toBe('respond-async');
    expect(accepted.headers['retry-after']).toBe('1');
    const location = accepted.headers.location!;
    expect(location).toMatch(/^\/_idempotency\/monitors\/reports\/[A-Za-z0-9_-]{30,}$/);
    expect(accepted.json()).toEqual({ status: 'running', monitor: location, retryAfterSeconds: 1 });

    const running = await monitor(proxy, accepted);
    expect(running.status).toBe(202);
    expect(running.headers['retry-after']).toBe('1');
    expect(running.json()).toMatchObject({ status: 'running' });

    const done = await settled(proxy, accepted);
    expect(done.status).toBe(201);
    expect(done.headers['idempotent-replayed']).toBe('true');
    expect(done.headers['x-report']).toBe('ready');
    expect(done.json()).toEqual({ report: 'slow-1', rows: 42 });
    // The retry of the request itself replays it too; the upstream ran once.
    const retried = await postJson(`${proxy.url}/reports`, 'slow-1', { month: 11 }, ASYNC);
    expect(retried.status).toBe(201);
    expect(retried.json()).toEqual({ report: 'slow-1', rows: 42 });
    expect(runs('slow-1')).toBe(1);
    const lines = proxy.logs.filter((l) => l.msg === 'request' && l.key === 'slow-1');
    expect(lines).toContainEqual(expect.objectContaining({ outcome: 'deferred', status: 202 }));
    expect(lines).toContainEqual(expect.objectContaining({ outcome: 'polled', status: 202 }));
    const metrics = await (await fetch(`${proxy.adminUrl}/metrics`)).text();
    expect(metrics).toMatch(
      /requests_total\{route="reports",outcome="deferred",status_class="2xx"\} 1/,
    );
    const polls =
      /requests_total\{route="reports",outcome="polled",status_class="2xx"\} (\d+)/.exec(metrics);
    expect(Number(polls?.[1])).toBeGreaterThanOrEqual(2);
  });

  test('without the preference, or answered within `after`, nothing changes', async () => {
    const waited = await postJson(
      `${proxy.url}/reports`,
      'no-pref',
      { month: 1 },
      {
        'x-tenant': 'acme',
        'x-wait': '800',
      },
    );
    expect(waited.status).toBe(201);
    expect(waited.headers['preference-applied']).toBeUndefined();
    const fast = await postJson(`${proxy.url}/reports`, 'fast', { month: 2 }, ASYNC);
    expect(fast.status).toBe(201);
    expect(fast.headers['preference-applied']).toBeUndefined();
    // A route without idempotency.async ignores the preference.
    const plain = await postJson(
      `${proxy.url}/plain`,
      'plain-slow',
      { month: 3 },
      {
        ...ASYNC,
        'x-wait': '800',
      },
    );
    expect(plain.status).toBe(201);
  });

  test("the client's wait preference defers sooner than the route's after", async () => {
    // wait=0 asks for an answer at once: the call is deferred as soon as the proxy can.
    const accepted = await postJson(
      `${proxy.url}/reports`,
      'wait-0',
      { month: 4 },
      {
        prefer: 'wait=0, respond-async',
        'x-tenant': 'acme',
        'x-wait': '250',
      },
    );
    expect(accepted.status).toBe(202);
  });

  test('a retry of the request while it runs behaves as without the preference (409)', async () => {
    const accepted = await postJson(
      `${proxy.url}/reports`,
      'busy',
      { month: 5 },
      {
        ...ASYNC,
        'x-wait': '1500',
      },
    );
    expect(accepted.status).toBe(202);
    const again = await postJson(`${proxy.url}/reports`, 'busy', { month: 5 }, ASYNC);
    expect(again.status).toBe(409);
    expect(again.headers['content-type']).toBe('application/problem+json');
    await settled(proxy, accepted);
    expect(runs('busy')).toBe(1);
  });

  test('another tenant, a forged secret, a broken link and a POST get clear errors', async () => {
    const accepted = await postJson(
      `${proxy.url}/reports`,
      'private',
      { month: 6 },
      {
        ...ASYNC,
        'x-wait': '600',
      },
    );
    expect(accepted.status).toBe(202);
    const location = accepted.headers.location!;
    const stranger = await monitor(proxy, accepted, 'globex');
    expect(stranger.status).toBe(404);
    expect(stranger.headers['content-type']).toBe('application/problem+json');
    expect(stranger.json()).toMatchObject({ code: 'MONITOR_NOT_FOUND' });
    expect(String(stranger.json().detail)).toMatch(/belongs to another caller/);

    const token = location.slice(location.lastIndexOf('/') + 1);
    const forged = `${location.slice(0, location.lastIndexOf('/') + 1)}${token[0] === 'A' ? 'B' : 'A'}${token.slice(1)}`;
    const wrongSecret = await send(`${proxy.url}${forged}`, {
      method: 'GET',
      headers: { 'x-tenant': 'acme' },
    });
    expect(wrongSecret.status).toBe(404);
    const garbage = await send(`${proxy.url}/_idempotency/monitors/reports/not-a-token`, {
      method: 'GET',
      headers: { 'x-tenant': 'acme' },
    });
    expect(garbage.status).toBe(404);
    const noRoute = await send(`${proxy.url}/_idempotency/monitors/plain/${token}`, {
      method: 'GET',
    });
    expect(noRoute.status).toBe(404);
    expect(noRoute.json()).toMatchObject({ code: 'MONITOR_NOT_FOUND' });
    const posted = await send(`${proxy.url}${location}`, { method: 'POST', body: '{}' });
    expect(posted.status).toBe(405);
    expect(posted.json()).toMatchObject({ code: 'MONITOR_METHOD_NOT_ALLOWED' });

    const done = await settled(proxy, accepted);
    expect(done.status).toBe(201);
    // Done or not, the other tenant still finds nothing.
    expect((await monitor(proxy, accepted, 'globex')).status).toBe(404);
  });
});

test('the monitor is answered by another instance, and after the first one restarted', async () => {
  const table = uniqueTable('async');
  const first = await startProxy({ yaml: yaml(), table });
  const second = await startProxy({ yaml: yaml(), table });
  let accepted: TestResponse;
  try {
    accepted = await postJson(
      `${first.url}/reports`,
      'two-instances',
      { month: 7 },
      {
        ...ASYNC,
        'x-wait': '1500',
      },
    );
    expect(accepted.status).toBe(202);
    expect((await monitor(second, accepted)).status).toBe(202);
    const done = await settled(second, accepted);
    expect(done.status).toBe(201);
    expect(done.json()).toEqual({ report: 'two-instances', rows: 42 });
  } finally {
    await first.close();
  }
  const restarted = await startProxy({ yaml: yaml(), table });
  try {
    const again = await monitor(restarted, accepted);
    expect(again.status).toBe(201);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(runs('two-instances')).toBe(1);
  } finally {
    await restarted.close();
    await second.close();
  }
});

test('a proxy killed mid-call leaves the monitor with the unknown outcome, once its lease ends', async () => {
  const table = uniqueTable('async_kill');
  const processYaml = `
listen: { host: 127.0.0.1, port: "\${PROXY_PORT}" }
admin: { port: "\${ADMIN_PORT}" }
store: { table: ${table} }
${yaml('2s')}`;
  const doomed = await startProxyProcess({
    yaml: processYaml,
    env: { DATABASE_URL: databaseUrl() },
  });
  const survivor = await startProxy({ yaml: yaml('2s'), table });
  try {
    const accepted = await postJson(
      `${doomed.url}/reports`,
      'killed',
      { month: 8 },
      {
        ...ASYNC,
        'x-wait': '6000',
      },
    );
    expect(accepted.status).toBe(202);
    await doomed.kill('SIGKILL');
    // While the lease runs the call may still be running somewhere: the monitor says so.
    expect((await monitor(survivor, accepted)).status).toBe(202);
    const lost = await settled(survivor, accepted);
    expect(lost.status).toBe(502);
    expect(lost.headers['idempotency-outcome']).toBe('unknown');
    expect(lost.json()).toMatchObject({ code: 'IDEMPOTENCY_OUTCOME_UNKNOWN' });
    // Settled for good: the request's own retry gets the same answer, and nothing runs again.
    const retried = await postJson(`${survivor.url}/reports`, 'killed', { month: 8 }, ASYNC);
    expect(retried.status).toBe(502);
    expect(retried.headers['idempotency-outcome']).toBe('unknown');
    await sleep(200);
    expect(runs('killed')).toBe(1);
  } finally {
    await survivor.close();
    await doomed.kill();
  }
});
