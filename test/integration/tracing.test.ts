// Traces: with OTEL_EXPORTER_OTLP_ENDPOINT set, each request is a span tree exported over OTLP/HTTP
// to a real receiver started here; the client's traceparent is continued and the upstream receives
// the proxy's upstream span as its parent. Asserts what the receiver got, what the upstream
// received and what never appears in an export (key, tenant, body). Off, nothing is exported and
// the client's trace headers reach the upstream unchanged.
//
// The proxy runs as `serve` in its own process (dist/, with the variables in its environment, as an
// operator sets them): the exporter loads node:http with import(), which jest's module sandbox
// refuses without --experimental-vm-modules.
import { randomBytes } from 'node:crypto';
import { until } from '../support/eventually';
import { send, postJson } from '../support/http';
import { startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from '../support/otlp-receiver';
import { databaseUrl, uniqueTable } from '../support/proxy';
import { type ProxyProcess, startProxyProcess } from '../support/proxy-process';
import { startUpstream, type ReceivedRequest, type TestUpstream } from '../support/upstream';

const SERVER = 2;
const CLIENT = 3;
const INTERNAL = 1;

const yaml = (upstreamUrl: string): string => `
listen: { host: 127.0.0.1, port: "\${PROXY_PORT}" }
admin: { host: 127.0.0.1, port: "\${ADMIN_PORT}" }
store: { table: ${uniqueTable('trace')} }
upstreams:
  payments: { url: ${upstreamUrl}, timeout: 5s }
routes:
  - name: refunds
    match: { method: POST, path: /refunds }
    upstream: payments
    idempotency:
      tenant: [header:authorization]
  - name: emails
    match: { method: POST, path: /emails }
    upstream: payments
    idempotency:
      key: { required: false, derive: [body], window: 10m }
  - name: everything-else
    match: { path: /** }
    upstream: payments
`;

const hex = (bytes: number): string => randomBytes(bytes).toString('hex');

/** A client's W3C traceparent: version 00, sampled. */
function clientContext(): { traceId: string; spanId: string; traceparent: string } {
  const traceId = hex(16);
  const spanId = hex(8);
  return { traceId, spanId, traceparent: `00-${traceId}-${spanId}-01` };
}

function lastReceived(upstream: TestUpstream): ReceivedRequest {
  const last = upstream.received.at(-1);
  if (!last) throw new Error('the upstream received nothing');
  return last;
}

describe('tracing on (OTEL_EXPORTER_OTLP_ENDPOINT set)', () => {
  let receiver: OtlpReceiver;
  let upstream: TestUpstream;
  let proxy: ProxyProcess;

  beforeAll(async () => {
    receiver = await startOtlpReceiver();
    upstream = await startUpstream();
    proxy = await startProxyProcess({
      yaml: yaml(upstream.url),
      env: {
        DATABASE_URL: databaseUrl(),
        OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
        OTEL_SERVICE_NAME: 'proxy-under-test',
        // Export every 50 ms instead of every 5 s, so the tests need not wait.
        OTEL_BSP_SCHEDULE_DELAY: '50',
      },
    });
  });

  afterAll(async () => {
    await proxy?.kill();
    await upstream?.close();
    await receiver?.close();
  });

  /** The spans of one trace once `count` of them are exported, and a little later (no more came). */
  async function spansOf(traceId: string, count: number): Promise<ReceivedSpan[]> {
    const inTrace = (): ReceivedSpan[] => receiver.spans.filter((span) => span.traceId === traceId);
    await until(() => inTrace().length >= count, `${count} spans of trace ${traceId}`);
    // Fixed wait asserting an absence: two more export rounds bring no further span of this trace.
    await new Promise((resolve) => setTimeout(resolve, 150));
    const spans = inTrace();
    expect(spans.map((span) => span.name)).toHaveLength(count);
    return spans;
  }

  function one(spans: ReceivedSpan[], name: string): ReceivedSpan {
    const named = spans.filter((span) => span.name === name);
    expect(named).toHaveLength(1);
    return named[0]!;
  }

  test('a new key is a span tree: request → claim, upstream, complete; the upstream is its child', async () => {
    const client = clientContext();
    const res = await postJson(
      `${proxy.url}/refunds`,
      'tr-new-1',
      { amount: 12 },
      {
        traceparent: client.traceparent,
        tracestate: 'vendor=opaque',
        authorization: 'Bearer tenant-secret-1',
      },
    );
    expect(res.status).toBe(201);

    const spans = await spansOf(client.traceId, 4);
    const request = one(spans, 'POST /refunds');
    expect(request.kind).toBe(SERVER);
    // The client's trace continues: same trace id, the client's span is the parent.
    expect(request.parentSpanId).toBe(client.spanId);
    expect(request.serviceName).toBe('proxy-under-test');
    expect(request.attributes).toMatchObject({
      'http.request.method': 'POST',
      'http.route': '/refunds',
      'http.response.status_code': 201,
      'idempotency.route': 'refunds',
      'idempotency.outcome': 'executed',
      'idempotency.replayed': false,
      'idempotency.key_derived': false,
      'idempotency.cached': false,
    });
    const claim = one(spans, 'idempotency.claim');
    const call = one(spans, 'upstream');
    const complete = one(spans, 'idempotency.complete');
    for (const child of [claim, call, complete]) expect(child.parentSpanId).toBe(request.spanId);
    expect(claim.kind).toBe(INTERNAL);
    expect(call.kind).toBe(CLIENT);
    expect(call.attributes).toMatchObject({
      'http.request.method': 'POST',
      'http.response.status_code': 201,
      'idempotency.upstream': 'payments',
      'server.address': '127.0.0.1',
      'server.port': upstream.port,
    });

    // The upstream sees the proxy's upstream span as its parent, and the client's tracestate.
    const received = lastReceived(upstream);
    expect(received.headers.traceparent).toBe(`00-${client.traceId}-${call.spanId}-01`);
    expect(received.headers.tracestate).toBe('vendor=opaque');
  });

  test('a replay is one request span with replayed=true and no upstream span', async () => {
    const body = { amount: 13 };
    const headers = { authorization: 'Bearer tenant-secret-1' };
    expect((await postJson(`${proxy.url}/refunds`, 'tr-replay-1', body, headers)).status).toBe(201);
    const executions = upstream.executions().length;

    const client = clientContext();
    const res = await postJson(`${proxy.url}/refunds`, 'tr-replay-1', body, {
      ...headers,
      traceparent: client.traceparent,
    });
    expect(res.headers['idempotent-replayed']).toBe('true');
    expect(upstream.executions()).toHaveLength(executions);

    const spans = await spansOf(client.traceId, 2);
    // The request and its claim (which found the completed record): no upstream span.
    expect(spans.map((span) => span.name).sort()).toEqual(['POST /refunds', 'idempotency.claim']);
    const request = one(spans, 'POST /refunds');
    expect(request.parentSpanId).toBe(client.spanId);
    expect(request.attributes).toMatchObject({
      'idempotency.outcome': 'replayed',
      'idempotency.replayed': true,
      'http.response.status_code': 201,
    });
  });

  test('a derived key says so, and a request without a traceparent starts a trace of its own', async () => {
    const res = await postJson(`${proxy.url}/emails`, undefined, { to: 'someone@example.test' });
    expect(res.status).toBe(201);
    const received = lastReceived(upstream);
    const traceparent = received.headers.traceparent as string;
    expect(traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
    const traceId = traceparent.split('-')[1]!;

    const spans = await spansOf(traceId, 4);
    const request = one(spans, 'POST /emails');
    expect(request.parentSpanId).toBe('');
    expect(request.attributes).toMatchObject({
      'idempotency.route': 'emails',
      'idempotency.key_derived': true,
      'idempotency.outcome': 'executed',
    });
    expect(traceparent.split('-')[2]).toBe(one(spans, 'upstream').spanId);
  });

  test('pass-through forwards the proxy’s upstream span as the traceparent', async () => {
    const client = clientContext();
    const res = await send(`${proxy.url}/orders/42`, {
      method: 'GET',
      headers: { traceparent: client.traceparent },
    });
    expect(res.status).toBe(201);

    const spans = await spansOf(client.traceId, 2);
    const request = one(spans, 'GET /**');
    expect(request.parentSpanId).toBe(client.spanId);
    expect(request.attributes).toMatchObject({
      'idempotency.route': 'everything-else',
      'idempotency.outcome': 'passthrough',
      'http.response.status_code': 201,
    });
    const call = one(spans, 'upstream');
    expect(call.parentSpanId).toBe(request.spanId);
    expect(call.attributes['http.response.status_code']).toBe(201);
    const received = lastReceived(upstream);
    expect(received.headers.traceparent).toBe(`00-${client.traceId}-${call.spanId}-01`);
  });

  test('an answer of the proxy’s own is a request span alone', async () => {
    const client = clientContext();
    const res = await send(`${proxy.url}/refunds`, {
      method: 'POST',
      headers: { traceparent: client.traceparent, 'content-type': 'application/json' },
      body: '{}',
    });
    expect(res.status).toBe(400); // no key on a protected route
    const spans = await spansOf(client.traceId, 1);
    expect(spans[0]!.attributes).toMatchObject({
      'idempotency.outcome': 'missing_key',
      'http.response.status_code': 400,
    });
  });

  test('no export ever carries a key, a tenant or a body', async () => {
    expect(receiver.bodies.length).toBeGreaterThan(0);
    const exported = Buffer.concat(receiver.bodies).toString('utf8');
    expect(receiver.requests.every((r) => r.path === '/v1/traces')).toBe(true);
    expect(receiver.requests[0]?.contentType).toMatch(/application\/json/);
    for (const secret of [
      'tr-new-1',
      'tr-replay-1',
      'tenant-secret-1',
      'someone@example.test',
      '"amount"',
      '/orders/42',
    ])
      expect(exported).not.toContain(secret);
  });
});

describe('tracing off', () => {
  test.each([
    ['OTEL_SDK_DISABLED=true', { OTEL_SDK_DISABLED: 'true' }],
    ['no endpoint', { OTEL_EXPORTER_OTLP_ENDPOINT: '' }],
  ])(
    'with %s nothing is exported, and the client’s trace headers reach the upstream unchanged',
    async (_what, off) => {
      const receiver = await startOtlpReceiver();
      const upstream = await startUpstream();
      const proxy = await startProxyProcess({
        yaml: yaml(upstream.url),
        env: {
          DATABASE_URL: databaseUrl(),
          OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
          OTEL_BSP_SCHEDULE_DELAY: '50',
          ...off,
        },
      });
      try {
        expect(proxy.output()).not.toContain('tracing:');
        const client = clientContext();
        const headers = { traceparent: client.traceparent, tracestate: 'vendor=opaque' };
        const res = await postJson(`${proxy.url}/refunds`, 'tr-off-1', { amount: 1 }, headers);
        expect(res.status).toBe(201);
        expect(lastReceived(upstream).headers).toMatchObject(headers);
        await send(`${proxy.url}/orders/7`, { method: 'GET', headers });
        expect(lastReceived(upstream).headers).toMatchObject(headers);
      } finally {
        // A traced proxy exports what is left when it stops: nothing may come even then.
        expect(await proxy.kill()).toBe(0);
        await upstream.close();
      }
      expect(receiver.requests).toHaveLength(0);
      await receiver.close();
    },
  );
});
