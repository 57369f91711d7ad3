// Wires the proxy together: router, pass-through and protected paths, logging, graceful close.
// createApp does not listen and does not own the database pool; serve (cli) and the tests do.
import http from 'node:http';
import type { Duplex } from 'node:stream';
import { performance } from 'node:perf_hooks';
import type { Logger } from 'pino';
import { type ProxyConfig, type RouteConfig, SAFE_METHODS } from './config/types';
import { ProxyError } from './errors';
import { problemType, sendProblem } from './http/problem';
import { newLogEntry, roundMs } from './http/request-log';
import { createRouter, parseRequestTarget, upstreamPath } from './http/router';
import { handleProtectedRequest, type ProtectedDeps } from './idempotency/protected-request';
import type { CompletionWaiter, KeyStore } from './idempotency/record';
import { PassThrough } from './upstream/passthrough';
import { UpstreamPools } from './upstream/protected';

export interface AppOptions {
  readonly config: ProxyConfig;
  readonly store: KeyStore;
  readonly logger: Logger;
  /** Wakes onConcurrent: wait requests (db/completion-listener.ts); without one they poll. */
  readonly waiter?: CompletionWaiter;
}

export interface App {
  readonly server: http.Server;
  /** Requests currently being handled. */
  inFlight(): number;
  /** Stops accepting, waits up to graceMs for in-flight requests, then closes everything. */
  close(graceMs?: number): Promise<void>;
}

export function createApp(options: AppOptions): App {
  const { config, store, logger } = options;
  const router = createRouter(config.routes);
  const upstreams = new UpstreamPools(config.upstreams.values());
  const passThrough = new PassThrough(config.upstreams.values());
  const deps: ProtectedDeps = {
    store,
    upstreams,
    passThrough,
    waiter: options.waiter,
    onStoreError: (error, operation) =>
      logger.error({ err: error, operation }, 'idempotency store operation failed'),
  };
  let active = 0;
  const idle: (() => void)[] = [];

  const server = http.createServer({ keepAliveTimeout: 5_000 }, (req, res) => {
    active++;
    const started = performance.now();
    const target = parseRequestTarget(req.url ?? '/');
    const method = req.method ?? 'GET';
    const entry = newLogEntry(method, target.path);
    // A request is done when its response closed AND (for protected ones) its handler settled: a client
    // that hangs up does not end the upstream call or the store write, and shutdown waits for those.
    let pending = 2;
    const done = (): void => {
      if (--pending > 0) return;
      entry.status = res.statusCode;
      entry.totalMs = roundMs(performance.now() - started);
      entry.storeMs = roundMs(entry.storeMs);
      entry.upstreamMs = roundMs(entry.upstreamMs);
      entry.waitMs = roundMs(entry.waitMs);
      logger.info(
        { ...entry, clientClosedEarly: res.writableFinished ? undefined : true },
        'request',
      );
      if (--active === 0) for (const resolve of idle.splice(0)) resolve();
    };
    res.once('close', done);

    const route = router.match(method, req.headers.host, target.path);
    if (!route) {
      entry.outcome = 'not_found';
      sendProblem(
        res,
        new ProxyError(
          'ROUTE_NOT_FOUND',
          `No route in the proxy's configuration matches ${method} ${target.path}. Check the base URL, or add a route for it.`,
        ),
      );
      return done();
    }
    entry.route = route.name;
    const policy = route.idempotency;
    if (!policy || !isProtectedMethod(route, method)) {
      entry.outcome = 'passthrough';
      passThrough.web(req, res, route, upstreamPath(route, target));
      return done();
    }
    handleProtectedRequest(deps, { req, res, route, policy, target, log: entry })
      .catch((error: unknown) => {
        logger.error({ err: error, route: route.name }, 'unexpected error in a protected request');
        entry.outcome = 'error';
        sendProblem(
          res,
          new ProxyError(
            'INTERNAL_ERROR',
            'The proxy failed unexpectedly; the request may not have been forwarded. Retry with the same key.',
            { route: route.name },
          ),
        );
      })
      .finally(done);
  });

  server.on('upgrade', (req, socket: Duplex, head: Buffer) => {
    const target = parseRequestTarget(req.url ?? '/');
    const method = req.method ?? 'GET';
    const route = router.match(method, req.headers.host, target.path);
    // Upgrades are GETs: they pass through on any matched route that does not protect GET itself.
    if (!route || (route.idempotency && isProtectedMethod(route, method))) {
      socket.end('HTTP/1.1 404 Not Found\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
      return;
    }
    passThrough.ws(req, socket, head, route, upstreamPath(route, target));
  });
  server.on('clientError', (error: NodeJS.ErrnoException, socket: Duplex) => {
    if (!socket.writable || error.code === 'ECONNRESET') return socket.destroy();
    socket.end(malformedRequestAnswer(error));
  });

  return {
    server,
    inFlight: () => active,
    async close(graceMs = config.shutdownGraceMs) {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      if (active > 0) {
        const drained = new Promise<void>((resolve) => idle.push(resolve));
        await Promise.race([drained, delay(graceMs)]);
      }
      server.closeAllConnections();
      await closed;
      passThrough.close();
      await upstreams.close();
    },
  };
}

/** Protected routes protect unsafe methods; GET/HEAD/OPTIONS only when listed with allowSafeMethods. */
function isProtectedMethod(route: RouteConfig, method: string): boolean {
  if (!SAFE_METHODS.has(method)) return true;
  const policy = route.idempotency;
  return policy !== null && policy.allowSafeMethods && route.match.methods?.has(method) === true;
}

/** A raw HTTP answer for a request Node's parser rejected (bad header bytes, oversized headers, …). */
function malformedRequestAnswer(error: NodeJS.ErrnoException): string {
  const tooLarge = error.code === 'HPE_HEADER_OVERFLOW';
  const body = JSON.stringify({
    type: problemType('BAD_REQUEST'),
    title: tooLarge ? 'Request headers too large' : 'Malformed request',
    status: tooLarge ? 431 : 400,
    detail: tooLarge
      ? 'The request headers are larger than the proxy accepts; send fewer or smaller headers.'
      : `The request is not valid HTTP/1.1 (${error.code ?? 'parse error'}): check for control characters in header names and values.`,
    code: 'BAD_REQUEST',
  });
  const status = tooLarge ? '431 Request Header Fields Too Large' : '400 Bad Request';
  return `HTTP/1.1 ${status}\r\ncontent-type: application/problem+json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`;
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}
