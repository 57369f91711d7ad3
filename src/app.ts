// Wires the proxy together: router, pass-through and protected paths, logging, metrics, reload and
// graceful close. createApp does not listen and does not own the database pool; serve (cli) and the
// tests do.
import type { Prober } from './reconcile/resolution';
import { hash } from 'node:crypto';
import http from 'node:http';
import type { Duplex } from 'node:stream';
import { performance } from 'node:perf_hooks';
import type { Logger } from 'pino';
import type { ProxyConfig } from './config/types';
import { ProxyError } from './errors';
import { readEdge } from './http/edge';
import { malformedRequestAnswer, rawProblemAnswer } from './http/malformed';
import { sendProblem } from './http/problem';
import { loggedPath, newLogEntry, type RequestLogEntry, roundMs } from './http/request-log';
import {
  isBodyNeeded,
  type RoutedRequest,
  routeRequest,
  routeWithBody,
} from './http/route-request';
import { BodyTooLargeError, readBody } from './http/body';
import { BodyBudget, bodyBytesToReserve } from './http/body-budget';
import type { HeaderFacts } from './http/header-lines';
import { serveProtected } from './protected/pipeline';
import { routeMonitor } from './rest/monitor';
import type { HandleStore } from './store/handles';
import type { Outcome, ProtectedDeps, Timings } from './protected/protocol';
import { adapterOf, protocolAdapters, type ProtocolAdapters } from './protocols';
import type { RequestStore } from './store/record';
import { requestLineWriter } from './observability/request-line';
import { storeErrorLog } from './observability/store-error-log';
import { storeTlsProblem } from './db/tls-problem';
import type { ProxyMetrics } from './metrics';
import { type RequestTrace, runTraced, type Tracing } from './observability/tracing';
import { restartOnlyChanges, Runtime } from './runtime';
import { createListener, type Listener, reloadListenerTls } from './listener';
import { within } from './timeout';

export interface AppOptions {
  readonly config: ProxyConfig;
  /** The store, with every memory shortcut in front (store/coalescing-store.ts). */
  readonly store: RequestStore;
  readonly logger: Logger;
  readonly metrics?: ProxyMetrics;
  /** Spans per request (observability/tracing.ts); without one (the default) nothing is traced. */
  readonly tracing?: Tracing;
  /**
   * The protocols' adapters (src/protocols.ts); by default REST, MCP and A2A. Pass the ones the
   * reconciler was given, so a route's probe and its requests are one protocol's.
   */
  readonly protocols?: ProtocolAdapters;
  /** Asks upstreams about unknown outcomes (idempotency.reconcile); without one nothing is probed. */
  readonly reconciler?: Prober;
  /** Where long calls keep their handles (docs/long-calls.md); without it no call is deferred. */
  readonly handles?: HandleStore;
}

export interface App {
  /** HTTPS when listen.tls is set. */
  readonly server: Listener;
  /** The config in force: the latest one reload() accepted. */
  config(): ProxyConfig;
  /** Requests currently being handled. */
  inFlight(): number;
  /** True once close() has begun. */
  draining(): boolean;
  /**
   * Swaps in a new config for new requests; in-flight ones finish on the old. Throws (and keeps the
   * old config) when the new one changes settings that need a restart.
   */
  reload(next: ProxyConfig): void;
  /** Stops accepting, waits up to graceMs for in-flight requests, then closes everything. */
  close(graceMs?: number): Promise<void>;
}

export function createApp(options: AppOptions): App {
  const { store, logger, metrics, tracing } = options;
  const onKeysError = (error: unknown): void =>
    logger.warn({ err: error }, 'fetching auth.jwt.jwks failed; the keys already held stay in use');
  let runtime = new Runtime(options.config, onKeysError);
  let active = 0;
  let closing = false;
  const idle: (() => void)[] = [];
  // Upgraded sockets (websockets) have left the HTTP server's books: closeAllConnections() misses
  // them, yet server.close() waits for them, so one open websocket kept a drained proxy running.
  const upgraded = new Set<Duplex>();
  const logRequest = requestLineWriter(logger);
  const adapters = options.protocols ?? protocolAdapters();
  const bodies = new BodyBudget(options.config.listen.maxBodyBytesInFlight);
  metrics?.watchRequestBodies(() => bodies.held);
  // store.tls needs a restart (runtime.ts), so the first config's is the one in use.
  const storeTls = options.config.store.url === undefined ? undefined : options.config.store.tls;
  const onStoreError = storeErrorLog(logger, undefined, (error) =>
    storeTlsProblem(error, storeTls, 'PostgreSQL'),
  );

  // What protected requests need of a runtime: made once per runtime, not once per request.
  const protectedDeps = new WeakMap<Runtime, ProtectedDeps>();
  const depsOf = (current: Runtime): ProtectedDeps => {
    let deps = protectedDeps.get(current);
    if (deps === undefined)
      protectedDeps.set(
        current,
        (deps = {
          store,
          upstreams: current.upstreams,
          passThrough: current.passThrough,
          observer: metrics,
          onStoreError,
          principals: current.principals,
          reconciler: options.reconciler,
          handles: options.handles,
        }),
      );
    return deps;
  };

  // Host is checked at the edge (edge.ts), so a request without one gets a problem+json 400 too.
  const server = createListener(
    options.config.listen.tls,
    { keepAliveTimeout: 5_000, requireHostHeader: false },
    (req, res) => {
      // Each request runs to its end on the runtime it started with, even if a reload swaps it.
      const current = runtime;
      current.enter();
      active++;
      const started = performance.now();
      const edge = readEdge(req, current.edge);
      const routing =
        edge instanceof ProxyError
          ? edge
          : (routeMonitor(current.config.routes, edge) ?? routeRequest(current.router, edge));
      const routedNow =
        routing instanceof ProxyError || isBodyNeeded(routing) ? undefined : routing;
      const entry = newLogEntry(
        routedNow?.target.method ?? req.method ?? 'GET',
        loggedPath(edge instanceof ProxyError ? (req.url ?? '/') : edge.path),
      );
      if (!(edge instanceof ProxyError) && edge.rawTarget !== undefined)
        entry.rawTarget = loggedPath(edge.rawTarget);
      const trace = tracing?.startRequest(req, entry.method, routedNow?.route);
      // A request is done when its response closed AND (for protected ones) its handler settled: a client
      // that hangs up does not end the upstream call or the store write, and shutdown waits for those.
      let pending = 2;
      // Bytes this request holds in the body budget until it is done (a body is resent on retries).
      let heldBytes = 0;
      const done = (): void => {
        if (--pending > 0) return;
        if (heldBytes > 0) bodies.release(heldBytes);
        finish(entry, res, performance.now() - started, current, trace);
        current.leave();
        if (--active === 0 && idle.length > 0) for (const resolve of idle.splice(0)) resolve();
      };
      // `on`, not `once`: a response closes once, and once's wrapper and removal were ~0.5k
      // instructions of a cached replay's ~100k.
      res.on('close', done);
      /** Reserves room for the body a protected route reads whole; false: answered 503. */
      const admitBody = (headers: HeaderFacts, limitBytes: number, route?: string): boolean => {
        if (heldBytes > 0) return true;
        const reserved = bodies.reserve(bodyBytesToReserve(headers, limitBytes));
        if (reserved === undefined) {
          refuseBody(res, entry, bodies, route);
          done();
          return false;
        }
        heldBytes = reserved;
        return true;
      };
      if (isBodyNeeded(routing)) {
        const { headers } = routing.edge;
        if (!admitBody(headers, routing.limitBytes)) return;
        // A POST whose form or JSON body may hold a `_method` that changes its route: read it first.
        readBody(req, routing.limitBytes, { contentLength: headers.contentLength }).then(
          (body) => serve(routeWithBody(current.router, routing.edge, headers.contentType, body)),
          (error: unknown) => {
            if (!(error instanceof BodyTooLargeError)) {
              entry.outcome = 'error';
              res.destroy();
              return done();
            }
            serve(
              new ProxyError(
                'REQUEST_TOO_LARGE',
                `The request body is larger than ${routing.limitBytes} bytes, the limit (maxRequestBytes) of the protected route a _method in it could reach; send a smaller body.`,
              ),
            );
          },
        );
        return;
      }
      serve(routing);

      function serve(routed: RoutedRequest | ProxyError): void {
        if (routed instanceof ProxyError) {
          entry.route = routed.route;
          entry.outcome = routed.code === 'ROUTE_NOT_FOUND' ? 'not_found' : 'bad_request';
          if (routed.code === 'REQUEST_TOO_LARGE') entry.outcome = 'too_large';
          // The rest of a refused request's body would be read as the next request: do not keep it.
          if (routed.status !== 404) res.shouldKeepAlive = false;
          sendProblem(res, routed);
          return done();
        }
        const { route, target } = routed;
        entry.route = route.name;
        entry.method = target.method;
        const policy = route.idempotency;
        if (!policy || !routed.protected) {
          entry.outcome = 'passthrough';
          current.passThrough.web(req, res, route, target, trace);
          return done();
        }
        if (!admitBody(target.headers, policy.maxRequestBytes, route.name)) return;
        const timings: Timings = { store: 0, upstream: 0, wait: 0, startedAt: started };
        const request = { req, res, route, policy, target, timings, trace };
        const finished = (outcome: Outcome): void => {
          noteOutcome(entry, outcome, timings);
          done();
        };
        const failed = (error: unknown): void => {
          logger.error(
            { err: error, route: route.name },
            'unexpected error in a protected request',
          );
          entry.outcome = 'error';
          sendProblem(
            res,
            new ProxyError(
              'INTERNAL_ERROR',
              'The proxy failed unexpectedly; the request may not have been forwarded. Retry with the same key.',
              { route: route.name },
            ),
          );
          done();
        };
        const protocol = adapterOf(adapters, policy);
        const deps = depsOf(current);
        if (trace === undefined) serveProtected(deps, protocol, request, { finished, failed });
        else runTraced(trace, () => serveProtected(deps, protocol, request, { finished, failed }));
      }
    },
  );

  const finish = (
    entry: RequestLogEntry,
    res: http.ServerResponse,
    totalMs: number,
    current: Runtime,
    trace: RequestTrace | undefined,
  ): void => {
    entry.status = res.statusCode;
    entry.totalMs = roundMs(totalMs);
    entry.storeMs = roundMs(entry.storeMs);
    entry.upstreamMs = roundMs(entry.upstreamMs);
    entry.waitMs = roundMs(entry.waitMs);
    metrics?.observeRequest(entry);
    // The entry is done with (metrics have read it): log it as is, no copy.
    if (entry.key !== undefined && current.hashesKeys.has(entry.route ?? ''))
      entry.key = hashKey(entry.key);
    if (!res.writableFinished) entry.clientClosedEarly = true;
    trace?.end(entry);
    logRequest(entry);
  };

  server.on('upgrade', (req, socket: Duplex, head: Buffer) => {
    upgraded.add(socket);
    socket.once('close', () => upgraded.delete(socket));
    const current = runtime;
    const edge = readEdge(req, current.edge);
    const routing = edge instanceof ProxyError ? edge : routeRequest(current.router, edge);
    // An upgrade carries no body to read a `_method` from: it is routed as it came.
    const routed = isBodyNeeded(routing)
      ? routeWithBody(current.router, routing.edge, undefined, Buffer.alloc(0))
      : routing;
    if (routed instanceof ProxyError) {
      socket.end(rawProblemAnswer(routed));
      return;
    }
    // Upgrades are GETs: they pass through on any matched route that does not protect GET itself.
    if (routed.protected) {
      socket.end('HTTP/1.1 404 Not Found\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
      return;
    }
    current.passThrough.ws(req, socket, head, routed.route, routed.target);
  });
  server.on('clientError', (error: NodeJS.ErrnoException, socket: Duplex) => {
    if (!socket.writable || error.code === 'ECONNRESET') return socket.destroy();
    socket.end(malformedRequestAnswer(error));
  });

  return {
    server,
    config: () => runtime.config,
    inFlight: () => active,
    draining: () => closing,
    reload(next) {
      const blocked = restartOnlyChanges(runtime.config, next);
      if (blocked.length > 0) {
        throw new Error(`these settings need a restart, not a reload: ${blocked.join(', ')}`);
      }
      const previous = runtime;
      runtime = new Runtime(next, onKeysError);
      bodies.limitBytes = next.listen.maxBodyBytesInFlight;
      reloadListenerTls(server, next.listen.tls);
      previous.retire();
    },
    async close(graceMs = runtime.config.shutdownGraceMs) {
      closing = true;
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      if (active > 0) {
        const drained = new Promise<void>((resolve) => idle.push(resolve));
        await within(drained, graceMs, () => undefined, true);
      }
      server.closeAllConnections();
      for (const socket of upgraded) socket.destroy();
      await closed;
      await runtime.close();
    },
  };
}

/** 503 before the body is read: the bodies in flight hold all the room listen.maxBodyBytesInFlight gives. */
function refuseBody(
  res: http.ServerResponse,
  entry: RequestLogEntry,
  bodies: BodyBudget,
  route: string | undefined,
): void {
  entry.route = route;
  entry.outcome = 'busy';
  // The body was not read: it must not be taken for the next request on this connection.
  res.shouldKeepAlive = false;
  sendProblem(
    res,
    new ProxyError(
      'BODIES_IN_FLIGHT_FULL',
      `The proxy holds ${bodies.held} bytes of request bodies, its limit (listen.maxBodyBytesInFlight) is ${bodies.limitBytes}: retry after the Retry-After delay with the same key.`,
      { route, retryAfterSeconds: 1 },
    ),
  );
}

/** The one place a protected request's log entry learns what became of it. */
function noteOutcome(entry: RequestLogEntry, outcome: Outcome, timings: Timings): void {
  entry.outcome = outcome.label;
  entry.key = outcome.key;
  entry.keyDerived = outcome.keyDerived;
  entry.tool = outcome.tool;
  entry.attempts = outcome.attempts;
  entry.cached = outcome.from === 'cache' || undefined;
  entry.coalesced = outcome.from === 'leader' || undefined;
  entry.outcomeUnknown = outcome.outcomeUnknown;
  entry.landing = outcome.landing;
  entry.reconcile = outcome.reconcile;
  entry.streamedBytes = outcome.streamedBytes;
  entry.shadow = outcome.shadow;
  entry.storeMs = timings.store;
  entry.upstreamMs = timings.upstream;
  entry.waitMs = timings.wait;
  if (timings.firstByte !== undefined) entry.firstByteMs = roundMs(timings.firstByte);
}

/** What the log shows for a key on a route with `logKey: hash`: enough to correlate, not to replay. */
export function hashKey(key: string): string {
  return `sha256:${hash('sha256', key, 'hex').slice(0, 16)}`;
}
