// An upstream that reads requests the ways servlet containers, Rails and Laravel do — the readings
// the edge suites must keep protected: `;…` segment parameters dropped (Tomcat, Spring), then the
// path decoded (twice, as a handler that decodes again does), dot segments resolved, each segment
// trimmed, a `.json`/`.xml` suffix taken as a format (Rails' `(.:format)`); a POST's `_method` read
// from a urlencoded or multipart form (Rack::MethodOverride), a JSON object (Laravel) or the query
// (Symfony). It runs the endpoint it reads and counts, per Idempotency-Key as received, what it ran.
import type { IncomingHttpHeaders } from 'node:http';
import { startUpstream, type ReceivedRequest, type TestUpstream } from './upstream';

/** The endpoints it runs: method and path as it reads them. */
const ENDPOINTS: readonly { name: string; method: string; path: RegExp }[] = [
  { name: 'refund', method: 'POST', path: /^\/refunds$/ },
  { name: 'order-refund', method: 'POST', path: /^\/orders\/[^/]+\/refund$/ },
  { name: 'delete-payment', method: 'DELETE', path: /^\/payments\/[^/]+$/ },
  { name: 'delete-account', method: 'DELETE', path: /^\/accounts\/[^/]+$/ },
];

export interface Execution {
  readonly endpoint: string;
  readonly key: string;
  readonly request: ReceivedRequest;
}

export interface ReadingUpstream {
  readonly url: string;
  readonly received: ReceivedRequest[];
  readonly executions: Execution[];
  /** How often `endpoint` ran for this key. */
  ran(endpoint: string, key: string): number;
  /** How often `endpoint` ran at all. */
  ranAtAll(endpoint: string): number;
  /** How often any endpoint ran for this key. */
  ranFor(key: string): number;
  close(): Promise<void>;
}

function decoded(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

/** The path as Tomcat/Spring and then Rails read it. */
export function servletRailsPath(target: string): string {
  const raw = target.split('?')[0]!.replace(/;[^/]*/g, '');
  const out: string[] = [];
  for (const segment of decoded(decoded(raw)).split('/')) {
    const token = segment.trim();
    if (token === '..') out.pop();
    else if (token !== '' && token !== '.') out.push(token);
  }
  return `/${out.join('/')}`.replace(/\/?\.(json|xml)$/, '');
}

/** A form field name as PHP registers it (leading spaces dropped; " ", "." and "[" → "_"). */
const phpName = (name: string): string => name.replace(/^ +/, '').replace(/[ .[]/g, '_');

function fromForm(fields: Iterable<[string, unknown]>): string | undefined {
  for (const [name, value] of fields)
    if (phpName(name) === '_method' && typeof value === 'string') return value;
  return undefined;
}

async function bodyMethod(headers: IncomingHttpHeaders, body: Buffer): Promise<string | undefined> {
  const type = String(headers['content-type'] ?? '');
  if (/^(application\/x-www-form-urlencoded|multipart\/form-data)/i.test(type)) {
    try {
      // undici's own form parser: independent of the proxy's reader.
      const form = await new Response(body, { headers: { 'content-type': type } }).formData();
      return fromForm(form.entries());
    } catch {
      return undefined;
    }
  }
  if (/^application\/(.+\+)?json/i.test(type)) {
    try {
      const parsed: unknown = JSON.parse(body.toString());
      const value = (parsed as Record<string, unknown> | null)?.['_method'];
      return typeof value === 'string' ? value : undefined;
    } catch {
      return undefined;
    }
  }
  return undefined;
}

/** Rack, Laravel, Symfony: a POST's `_method` from the body, else the query, wins. */
export async function railsMethod(req: ReceivedRequest): Promise<string> {
  if (req.method !== 'POST') return req.method;
  const query = fromForm(new URLSearchParams(req.url.split('?')[1] ?? '').entries());
  return ((await bodyMethod(req.headers, req.body)) ?? query ?? req.method).toUpperCase();
}

export async function startReadingUpstream(): Promise<ReadingUpstream> {
  const executions: Execution[] = [];
  const upstream: TestUpstream = await startUpstream(async (req, res) => {
    const path = servletRailsPath(req.url);
    const method = await railsMethod(req);
    const endpoint = ENDPOINTS.find((e) => e.method === method && e.path.test(path))?.name;
    if (endpoint !== undefined)
      executions.push({
        endpoint,
        key: String(req.headers['idempotency-key'] ?? ''),
        request: req,
      });
    res.writeHead(endpoint === undefined ? 200 : 201, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ endpoint: endpoint ?? 'other', method, path, n: executions.length }));
  });
  const count = (match: (e: Execution) => boolean): number => executions.filter(match).length;
  return {
    url: upstream.url,
    received: upstream.received,
    executions,
    ran: (endpoint, key) => count((e) => e.endpoint === endpoint && e.key === key),
    ranAtAll: (endpoint) => count((e) => e.endpoint === endpoint),
    ranFor: (key) => count((e) => e.key === key),
    close: () => upstream.close(),
  };
}

/**
 * The edge-readings config: the endpoints above as protected routes, each with `formats: [json, xml]`
 * (this upstream takes a format suffix on every path, as Rails does; a route without it would leave
 * `/accounts/7.json` to the pass-through route), a methodOverride route, two routes that `/a;x/b`
 * reaches one per reading, and a pass-through `/**` to the same upstream.
 */
export function readingsYaml(upstream: { readonly url: string }): string {
  return `
store: { table: "\${TEST_TABLE}" }
upstreams:
  app: { url: ${upstream.url} }
routes:
  - name: refunds
    match: { method: POST, path: /refunds, formats: [json, xml] }
    upstream: app
    idempotency:
      tenant: [header:authorization]
  - name: order-refund
    match: { method: POST, path: /orders/:id/refund, formats: [json, xml] }
    upstream: app
    idempotency:
      tenant: [header:authorization]
  - name: payment-delete
    match: { method: DELETE, path: /payments/:id, formats: [json, xml] }
    upstream: app
    idempotency: {}
  - name: account-delete
    match: { method: DELETE, path: /accounts/:id, formats: [json, xml] }
    methodOverride: true
    upstream: app
    idempotency: {}
  - name: ab
    match: { method: POST, path: /a/b }
    upstream: app
    idempotency: {}
  - name: any-b
    match: { method: POST, path: /:x/b }
    upstream: app
    idempotency: {}
  - name: everything-else
    match: { path: /** }
    upstream: app
`;
}

const BOUNDARY = 'proxy-test-boundary';
/** A multipart/form-data body of these text fields (Content-Type: MULTIPART). */
export function multipart(fields: [string, string][], boundary = BOUNDARY): Buffer {
  const parts = fields.map(
    ([name, value]) =>
      `--${boundary}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`,
  );
  return Buffer.from(`${parts.join('')}--${boundary}--\r\n`);
}
export const MULTIPART = `multipart/form-data; boundary=${BOUNDARY}`;
