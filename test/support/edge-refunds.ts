// The config and the requests the path-bypass suites share (src/http/README.md): a protected POST
// /refunds with a tenant, a pass-through /** to the same upstream, and a stripPrefix route to the
// same upstream under a base path — the shipped config's shape, so a bypass here is a bypass there.
import { type HeaderLines, rawPostJson, type RawResponse } from './edge-raw';
import { refundUpstreams, type RefundUpstream } from './edge-upstreams';
import { startProxy, type TestProxy } from './proxy';

export const TENANT = 'Bearer edge-tenant';
export const REFUND_BODY = '{"amount":1000}';

export function refundsYaml(upstream: RefundUpstream): string {
  return `
store: { table: "\${TEST_TABLE}" }
upstreams:
  payments: { url: ${upstream.url} }
  mailer: { url: ${upstream.url}/api }
routes:
  - name: refunds
    match: { method: POST, path: /refunds }
    upstream: payments
    idempotency:
      tenant: [header:authorization]
  - name: order-refund
    match: { method: POST, path: /orders/:id/refund }
    upstream: payments
    idempotency:
      tenant: [header:authorization]
  - name: strict-refunds
    match: { method: POST, path: /strict/refunds, strict: true }
    upstream: payments
    idempotency: {}
  - name: emails
    match: { method: POST, path: /mail/emails }
    upstream: mailer
    stripPrefix: /mail
    idempotency: {}
  - name: mail
    match: { path: /mail/** }
    upstream: mailer
    stripPrefix: /mail
  - name: status
    match: { path: /status }
    upstream: payments
  - name: everything-else
    match: { path: /** }
    upstream: payments
`;
}

/** A raw-socket POST of the refund body to `target`, exactly as written, with this key. */
export function postRefund(
  port: number,
  target: string,
  key: string,
  headers: HeaderLines = [],
): Promise<RawResponse> {
  return rawPostJson(
    port,
    target,
    [['Authorization', TENANT], ['Idempotency-Key', key], ...headers],
    REFUND_BODY,
  );
}

export type UpstreamKind = keyof typeof refundUpstreams;
export const UPSTREAM_KINDS = Object.keys(refundUpstreams) as UpstreamKind[];

/**
 * Starts (beforeAll) and stops (afterAll) an upstream of this kind and a proxy with refundsYaml in
 * front of it, for the enclosing describe block; read them through the getters once tests run.
 */
export function refundsProxyPer(kind: UpstreamKind): {
  readonly upstream: RefundUpstream;
  readonly proxy: TestProxy;
} {
  let upstream: RefundUpstream | undefined;
  let proxy: TestProxy | undefined;
  beforeAll(async () => {
    upstream = await refundUpstreams[kind]();
    proxy = await startProxy({ yaml: refundsYaml(upstream) });
  });
  afterAll(async () => {
    await proxy?.close();
    await upstream?.close();
  });
  const started = <T>(value: T | undefined): T => {
    if (value === undefined) throw new Error('the proxy is started in beforeAll');
    return value;
  };
  return {
    get upstream() {
      return started(upstream);
    },
    get proxy() {
      return started(proxy);
    },
  };
}

let keys = 0;
/** A key no other request in this process uses. */
export function freshKey(label: string): string {
  keys++;
  return `${label}-${process.pid}-${Date.now().toString(36)}-${keys}`;
}
