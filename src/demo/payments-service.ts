// The demo "legacy" payments API the default config protects. Deliberately not idempotent: every
// POST /refunds creates a new refund, whatever key or body it carries. `SLOW_MS` (or ?slow=ms) makes
// it slow, so a client times out and retries, as agents do.
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Refund {
  readonly id: string;
  readonly order: string | undefined;
  readonly amount: number | undefined;
  readonly idempotencyKey: string | undefined;
  readonly createdAt: string;
}

export interface PaymentsService {
  readonly server: http.Server;
  readonly url: string;
  readonly refunds: Refund[];
  close(): Promise<void>;
}

export interface PaymentsOptions {
  readonly port?: number;
  readonly host?: string;
  /** Default delay of POST /refunds, in ms (?slow= overrides it per request). */
  readonly slowMs?: number;
  readonly onRefund?: (refund: Refund) => void;
}

export async function startPaymentsService(
  options: PaymentsOptions = {},
): Promise<PaymentsService> {
  const { port = 4000, host = '127.0.0.1', slowMs = 0, onRefund } = options;
  const refunds: Refund[] = [];
  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://payments');
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      if (url.pathname === '/refunds' && req.method === 'POST') {
        const delay = Number(url.searchParams.get('slow') ?? slowMs);
        // ?answer_late=ms: the refund is made at once, its answer sent that much later (a timeout
        // after the side effect: the proxy's unknown outcome, docs/reconcile.md).
        const late = Number(url.searchParams.get('answer_late') ?? 0);
        setTimeout(() => {
          const refund = createRefund(req, Buffer.concat(chunks), refunds, res, late);
          if (refund) onRefund?.(refund);
        }, delay);
      } else if (url.pathname === '/refunds' && req.method === 'GET') {
        // ?idempotency_key=K: the refunds made under that key (how a reconcile probe asks).
        const key = url.searchParams.get('idempotency_key');
        const found = key === null ? refunds : refunds.filter((r) => r.idempotencyKey === key);
        reply(res, 200, { count: found.length, refunds: found });
      } else if (url.pathname === '/health') {
        reply(res, 200, { ok: true });
      } else {
        reply(res, 404, { error: `no ${req.method} ${url.pathname} here` });
      }
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, resolve);
  });
  const address = server.address() as AddressInfo;
  return {
    server,
    url: `http://${host}:${address.port}`,
    refunds,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

function createRefund(
  req: http.IncomingMessage,
  body: Buffer,
  refunds: Refund[],
  res: http.ServerResponse,
  answerLateMs = 0,
): Refund | undefined {
  let input: { order?: string; amount?: number } = {};
  try {
    input = JSON.parse(body.toString('utf8') || '{}') as typeof input;
  } catch {
    reply(res, 400, { error: 'body must be JSON like {"order":"ord_1","amount":49.99}' });
    return undefined;
  }
  const refund: Refund = {
    id: `re_${String(refunds.length + 1).padStart(4, '0')}`,
    order: input.order,
    amount: input.amount,
    idempotencyKey: header(req, 'idempotency-key'),
    createdAt: new Date().toISOString(),
  };
  refunds.push(refund);
  if (answerLateMs > 0) setTimeout(() => res.destroyed || reply(res, 201, refund), answerLateMs);
  else reply(res, 201, refund);
  return refund;
}

function header(req: http.IncomingMessage, name: string): string | undefined {
  const value = req.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

function reply(res: http.ServerResponse, status: number, value: unknown): void {
  const body = JSON.stringify(value);
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
  });
  res.end(body);
}

if (require.main === module) {
  const port = Number(process.env.PAYMENTS_PORT ?? 4000);
  const host = process.env.PAYMENTS_HOST ?? '127.0.0.1';
  startPaymentsService({
    port,
    host,
    slowMs: Number(process.env.SLOW_MS ?? 0),
    onRefund: (refund) =>
      process.stdout.write(
        `[payments] refund ${refund.id} of ${refund.amount ?? '?'} for ${refund.order ?? '?'} created\n`,
      ),
  }).then(
    (service) =>
      process.stdout.write(
        `demo payments service (not idempotent) on ${service.url}: POST /refunds, GET /refunds\n`,
      ),
    (error: unknown) => {
      process.stderr.write(`payments service: ${String(error)}\n`);
      process.exit(1);
    },
  );
}
