// The second act of `npm run demo` (docs/reconcile.md): the payments service makes the refund, then
// answers later than the proxy waits. The proxy cannot know whether the refund happened, so the
// agent gets 504 with Idempotency-Outcome: unknown and a Retry-After; when it retries, the proxy
// asks the service (GET /refunds?idempotency_key=…) and answers with the real refund. One refund.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import { request } from 'undici';
import { parseDocument } from 'yaml';

/** The route this act adds to config/proxy.yaml, and the upstream it needs. */
export const RECONCILE_PREFIX = '/reconciled';
const UPSTREAM_TIMEOUT = '1s';

/**
 * config/proxy.yaml with one more route: /reconciled/refunds to the payments service with a short
 * timeout and a reconcile probe. Written to a temporary file, which the caller removes.
 */
export function writeReconcileConfig(shippedConfig: string): string {
  const document = parseDocument(fs.readFileSync(shippedConfig, 'utf8'));
  document.setIn(['upstreams', 'payments-reconciled'], {
    url: '${PAYMENTS_URL:-http://127.0.0.1:4000}',
    timeout: UPSTREAM_TIMEOUT,
  });
  const routes = document.get('routes') as { items: unknown[] };
  routes.items.unshift(
    document.createNode({
      name: 'refunds-reconciled',
      match: { path: `${RECONCILE_PREFIX}/refunds` },
      upstream: 'payments-reconciled',
      stripPrefix: RECONCILE_PREFIX,
      idempotency: {
        reconcile: {
          request: { path: '/refunds?idempotency_key={key}' },
          found: { status: [200], exists: '/refunds/0' },
          answer: { status: 201, body: '/refunds/0' },
          after: '2s',
          every: '0s',
        },
      },
    }),
  );
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'idempotency-proxy-demo-'));
  const file = path.join(dir, 'proxy.yaml');
  fs.writeFileSync(file, document.toString());
  return file;
}

export interface ReconcileStoryResult {
  readonly firstStatus: number;
  readonly firstOutcome: string | undefined;
  readonly finalStatus: number;
  readonly finalOutcome: string | undefined;
  readonly refundId: string | undefined;
  readonly refundsForKey: number;
}

export async function tellReconcileStory(options: {
  readonly proxyUrl: string;
  readonly paymentsUrl: string;
  readonly print: (line: string) => void;
}): Promise<ReconcileStoryResult> {
  const { print } = options;
  const key = `refund-${randomUUID()}`;
  print(
    `The payments service refunds order ord_4022 at once, then takes 3 s to answer; the proxy waits ${UPSTREAM_TIMEOUT}.`,
  );
  const post = () =>
    request(`${options.proxyUrl}${RECONCILE_PREFIX}/refunds?answer_late=3000`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body: JSON.stringify({ order: 'ord_4022', amount: 12.5, reason: 'Damaged item' }),
    });
  const first = await post();
  await first.body.text();
  const firstOutcome = header(first.headers['idempotency-outcome']);
  const retryAfter = Number(header(first.headers['retry-after']) ?? 1);
  print(
    `  attempt 1: ${first.statusCode}, Idempotency-Outcome: ${firstOutcome ?? '-'}, Retry-After: ${retryAfter}`,
  );
  await new Promise((resolve) => setTimeout(resolve, retryAfter * 1000));
  const second = await post();
  const body = (await second.body.json()) as { id?: string };
  const finalOutcome = header(second.headers['idempotency-outcome']);
  print(
    `  attempt 2: ${second.statusCode} refund ${body.id ?? '?'}, Idempotency-Outcome: ${finalOutcome ?? '-'} (the proxy asked the service)`,
  );
  const lookup = await request(`${options.paymentsUrl}/refunds?idempotency_key=${key}`);
  const { count } = (await lookup.body.json()) as { count: number };
  print(`  → 2 attempts, ${count} refund${count === 1 ? '' : 's'} created; the agent has its id.`);
  return {
    firstStatus: first.statusCode,
    firstOutcome,
    finalStatus: second.statusCode,
    finalOutcome,
    refundId: body.id,
    refundsForKey: count,
  };
}

function header(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}
