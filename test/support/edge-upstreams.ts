// Two upstreams that decide for themselves what "the refund endpoint" is, the way real services do,
// for the edge suites (src/http/README.md): one normalises the path with the WHATWG URL parser (as
// a Node service that routes on `new URL(req.url, base).pathname` does), one is a real Express 5
// app with its default case-insensitive, non-strict routing. Each counts, per Idempotency-Key, how
// often it ran the refund: the number a proxy must keep at one.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import { startUpstream, type ReceivedRequest } from './upstream';

export const REFUND_PATH = '/refunds';
/** A second refund endpoint, with a path parameter: `/orders/<id>/refund`. */
export const ORDER_REFUND_ROUTE = '/orders/:id/refund';
const ORDER_REFUND_PATH = /^\/orders\/[^/]+\/refund$/;

export interface RefundUpstream {
  readonly kind: 'whatwg' | 'express';
  readonly url: string;
  /** Every request received, in order. */
  readonly received: ReceivedRequest[];
  /** How often the refund endpoint ran for this Idempotency-Key (as the upstream received it). */
  refundsFor(key: string): number;
  /** The requests for which the refund endpoint ran. */
  readonly refunds: ReceivedRequest[];
  close(): Promise<void>;
}

const keyOf = (req: ReceivedRequest): string => {
  const value = req.headers['idempotency-key'];
  return Array.isArray(value) ? value.join(',') : (value ?? '');
};

function counting(
  kind: RefundUpstream['kind'],
  url: string,
  received: ReceivedRequest[],
  refunds: ReceivedRequest[],
  close: () => Promise<void>,
): RefundUpstream {
  return {
    kind,
    url,
    received,
    refunds,
    refundsFor: (key) => refunds.filter((req) => keyOf(req) === key).length,
    close,
  };
}

function refundAnswer(res: http.ServerResponse, req: ReceivedRequest, n: number): void {
  res.writeHead(201, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ refund: n, url: req.url }));
}

function otherAnswer(res: http.ServerResponse, req: ReceivedRequest): void {
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ other: true, method: req.method, url: req.url }));
}

/**
 * Runs the refund when the method is POST and `new URL(req.url, 'http://x').pathname` is `/refunds`
 * or `/orders/<id>/refund`.
 */
export async function startWhatwgUpstream(): Promise<RefundUpstream> {
  const refunds: ReceivedRequest[] = [];
  const upstream = await startUpstream((req, res) => {
    const pathname = new URL(req.url, 'http://x').pathname;
    if (req.method === 'POST' && (pathname === REFUND_PATH || ORDER_REFUND_PATH.test(pathname))) {
      refunds.push(req);
      refundAnswer(res, req, refunds.length);
    } else otherAnswer(res, req);
  });
  return counting('whatwg', upstream.url, upstream.received, refunds, () => upstream.close());
}

/**
 * A real Express 5 app: `app.post('/refunds')` and `app.post('/orders/:id/refund')` under Express's
 * default (lenient) routing.
 */
export async function startExpressUpstream(): Promise<RefundUpstream> {
  const received: ReceivedRequest[] = [];
  const refunds: ReceivedRequest[] = [];
  const app = express();
  app.use(express.raw({ type: () => true, limit: '1mb' }));
  const recorded = (req: express.Request): ReceivedRequest => ({
    method: req.method,
    url: req.originalUrl,
    headers: req.headers,
    rawHeaders: req.rawHeaders,
    body: Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0),
  });
  app.use((req, res, next) => {
    const seen = recorded(req);
    received.push(seen);
    res.locals.seen = seen;
    next();
  });
  const seenBy = (res: express.Response): ReceivedRequest => res.locals.seen as ReceivedRequest;
  app.post([REFUND_PATH, ORDER_REFUND_ROUTE], (_req, res) => {
    refunds.push(seenBy(res));
    refundAnswer(res, seenBy(res), refunds.length);
  });
  app.use((_req, res) => otherAnswer(res, seenBy(res)));
  const server = http.createServer(app);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return counting('express', `http://127.0.0.1:${port}`, received, refunds, async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
}

export const refundUpstreams = {
  whatwg: startWhatwgUpstream,
  express: startExpressUpstream,
} as const;
