// Pass-through routes (and safe methods on protected routes) forward through undici, on the same
// per-upstream Pool as protected requests (protected.ts): one upstream engine. Streamed both ways —
// the request body is piped up as it arrives, the answer written down chunk by chunk with
// backpressure — and either side going away aborts the other; transport errors map to 502/504.
// Websocket upgrades, which undici does not relay, go through http-proxy-3 (websocket-proxy.ts).
import http from 'node:http';
import https from 'node:https';
import type { Duplex, Readable } from 'node:stream';
import { errors, type Dispatcher } from 'undici';
import type { RouteConfig, UpstreamConfig } from '../config/types';
import { EDGE_HEADERS, forwardedHeaders, hopByHopNames, keepsEdgeHeader } from '../http/headers';
import type { RequestTarget } from '../http/router';
import { sendProblem } from '../http/problem';
import { rawProblemAnswer } from '../http/malformed';
import { TRACE_HEADERS, type RequestTrace, type UpstreamSpan } from '../observability/tracing';
import { type UpstreamPools, upstreamTlsOptions } from './protected';
import { rawHeaderList, responseHeaders } from './response-head';
import { classifyTransportError } from './transport-errors';
import type { WebSocketProxy } from './websocket-proxy';

/**
 * A body at least this large (or chunked, length unknown) may still be arriving long after the
 * request went out; undici's headers timeout would count that upload against the upstream, so such a
 * request gets an idle timer of ours instead, refreshed by every chunk sent (as a socket timeout
 * would be). Smaller bodies arrive in a packet or two: undici's own timeout, no timer per request.
 */
const STREAMED_UPLOAD_BYTES = 64 * 1024;

/** Request headers the pass-through sets itself rather than copies. */
const SET_HERE: ReadonlySet<string> = new Set([
  // undici writes the upstream's authority (what http-proxy's changeOrigin did).
  'host',
  // Node's server has answered the client's 100-continue already (it sends 100 Continue before the
  // request event); undici does not support the expectation and the body is sent at once anyway.
  'expect',
  'x-forwarded-for',
  'x-forwarded-proto',
  'x-forwarded-host',
]);

export class PassThrough {
  private readonly wsProxies = new Map<string, WebSocketProxy>();
  private readonly wsTargets = new Map<string, WebSocketTarget>();
  private readonly agents: http.Agent[] = [];

  constructor(
    upstreams: Iterable<UpstreamConfig>,
    private readonly pools: UpstreamPools,
  ) {
    for (const upstream of upstreams) {
      const settings = { keepAlive: true, keepAliveMsecs: 1_000, maxFreeSockets: 256 };
      const agent = upstream.origin.startsWith('https:')
        ? new https.Agent({
            ...settings,
            ...(upstream.tls ? upstreamTlsOptions(upstream.tls) : {}),
          })
        : new http.Agent(settings);
      this.agents.push(agent);
      const rejectUnauthorized = upstream.tls?.rejectUnauthorized ?? true;
      this.wsTargets.set(upstream.name, { origin: upstream.origin, agent, rejectUnauthorized });
    }
  }

  web(
    req: http.IncomingMessage,
    res: http.ServerResponse,
    route: RouteConfig,
    target: RequestTarget,
    /** The request's spans when tracing is on: the upstream gets our span's traceparent. */
    trace?: RequestTrace,
  ): void {
    const upstream = route.upstream;
    const incoming = req.headers;
    // A body the edge already read (to find a `_method`) goes up as read, with its own length.
    const read = target.body;
    const length = read === undefined ? incoming['content-length'] : String(read.length);
    const chunked = read === undefined && incoming['transfer-encoding'] !== undefined;
    const hasBody = chunked || (length !== undefined && length !== '0');
    const watchesUpload = chunked || (hasBody && Number(length) >= STREAMED_UPLOAD_BYTES);
    const headers = upstreamHeaders(req, target, trace !== undefined);
    if (read !== undefined) setContentLength(headers, read.length);
    const span = trace?.upstream(upstream, req.method ?? 'GET', (name, value) =>
      headers.push(name, value),
    );
    const exchange = new Exchange(res, route, watchesUpload ? upstream.timeoutMs : 0, span);
    // An event-stream subscription (EventSource, an MCP client's GET) is quiet for as long as the
    // server has nothing to say: the upstream timeout is for an answer, not for such silence.
    const subscribes = req.method === 'GET' && /text\/event-stream/i.test(incoming.accept ?? '');
    this.pools.dispatcher(upstream).dispatch(
      {
        method: req.method as Dispatcher.HttpMethod,
        path: target.forwardPath,
        headers,
        body: read ?? (chunked ? chunksOf(req) : hasBody ? req : null),
        headersTimeout: watchesUpload ? 0 : upstream.timeoutMs,
        bodyTimeout: subscribes ? 0 : upstream.timeoutMs,
      },
      exchange,
    );
  }

  ws(
    req: http.IncomingMessage,
    socket: Duplex,
    head: Buffer,
    route: RouteConfig,
    target: RequestTarget,
  ): void {
    prepareUpgrade(req, target);
    this.relayFor(route).relay(req, socket, head, (error) => {
      const upstream = route.upstream;
      const failure = classifyTransportError(error, {
        upstream: upstream.name,
        route: route.name,
        timeoutMs: upstream.timeoutMs,
      });
      // Not connected (refused, a certificate that fails verification): no answer has been written,
      // so the client learns why, as on any other request. After an upgrade, only a cut is honest.
      if (!failure.sent && socket.writable) socket.end(rawProblemAnswer(failure.error));
      else socket.destroy();
    });
  }

  /** Closes the websocket side; the pools are closed with UpstreamPools. */
  close(): void {
    for (const proxy of this.wsProxies.values()) proxy.close();
    for (const agent of this.agents) agent.destroy();
  }

  private relayFor(route: RouteConfig): WebSocketProxy {
    const name = route.upstream.name;
    const made = this.wsProxies.get(name);
    if (made) return made;
    const target = this.wsTargets.get(name);
    if (!target) throw new Error(`no websocket proxy for upstream ${name}`);
    const proxy = new (loadWebSocketProxy())(
      target.origin,
      target.agent,
      target.rejectUnauthorized,
    );
    this.wsProxies.set(name, proxy);
    return proxy;
  }
}

interface WebSocketTarget {
  readonly origin: string;
  readonly agent: http.Agent;
  readonly rejectUnauthorized: boolean;
}

/**
 * http-proxy-3 (and what it pulls in) is loaded with the first upgrade: most proxies never see one,
 * and loaded at start it was part of what an idle proxy kept resident.
 */
function loadWebSocketProxy(): typeof WebSocketProxy {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return (require('./websocket-proxy') as typeof import('./websocket-proxy')).WebSocketProxy;
}

/**
 * One forwarded request, as undici's dispatch handler (the controller form, the only one undici 8
 * takes). The head is written from the raw header list the controller keeps, not from the object
 * undici parses: names keep their spelling and order, repeats stay separate lines.
 */
class Exchange implements Dispatcher.DispatchHandler {
  private controller: Dispatcher.DispatchController | undefined;
  /** Made once, when the client first reads slower than the upstream sends. */
  private resumeUpstream: (() => void) | undefined;
  private settled = false;
  private clientGone = false;
  private uploadTimer: NodeJS.Timeout | undefined;
  private status = 0;

  constructor(
    private readonly res: http.ServerResponse,
    private readonly route: RouteConfig,
    /** The idle timeout while a large body goes up (STREAMED_UPLOAD_BYTES); 0: undici's. */
    private readonly uploadTimeoutMs: number,
    /** The upstream span of a traced request. */
    private readonly span: UpstreamSpan | undefined,
  ) {
    res.on('close', this.onClientClose); // emitted once; `once` would wrap it per request
  }

  /** The client hung up (or the answer is done): stop the upstream request if it still runs. */
  private readonly onClientClose = (): void => {
    if (this.settled) return;
    this.clientGone = true;
    this.controller?.abort(new errors.RequestAbortedError());
  };

  /** A method, not a bound property: only large uploads need it, so most requests allocate none. */
  private onUploadIdle(): void {
    const ms = this.uploadTimeoutMs;
    this.controller?.abort(
      Object.assign(new Error(`upstream sent nothing for ${ms} ms`), { code: 'ETIMEDOUT' }),
    );
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.controller = controller;
    if (this.clientGone) return controller.abort(new errors.RequestAbortedError());
    if (this.uploadTimeoutMs > 0 && !this.uploadTimer)
      this.uploadTimer = setTimeout(() => this.onUploadIdle(), this.uploadTimeoutMs);
  }

  onBodySent(): void {
    this.uploadTimer?.refresh();
  }

  onRequestSent(): void {
    this.uploadTimer?.refresh();
  }

  onResponseStart(
    controller: Dispatcher.DispatchController,
    status: number,
    parsed: http.IncomingHttpHeaders,
    statusText: string,
  ): void {
    // Informational answers (103) are not relayed, as with http-proxy; undici refuses a 100 itself.
    if (status < 200) return;
    if (this.uploadTimer) clearTimeout(this.uploadTimer);
    this.status = status;
    const res = this.res;
    if (res.destroyed) return;
    const head = responseHeaders(rawHeaderList(controller.rawHeaders, parsed), res.shouldKeepAlive);
    res.writeHead(status, statusText, head.headers);
    // Node holds a head back until the first body write; an event stream's client is waiting for
    // it to know the stream is open, and the first event may be minutes away.
    if (head.eventStream) res.flushHeaders();
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    const res = this.res;
    if (res.write(chunk) || res.destroyed) return;
    // The client reads slower than the upstream sends: undici stops reading until it drains.
    controller.pause();
    res.once('drain', (this.resumeUpstream ??= () => controller.resume()));
  }

  onResponseEnd(): void {
    // Trailers are dropped, as http-proxy's pipe did (TE and Trailer are hop-by-hop here).
    this.settled = true;
    this.res.end();
    this.span?.end(this.status);
  }

  onResponseError(_controller: Dispatcher.DispatchController, error: Error): void {
    this.settled = true;
    this.span?.end(this.status, error);
    if (this.uploadTimer) clearTimeout(this.uploadTimer);
    const upstream = this.route.upstream;
    const failure = classifyTransportError(error, {
      upstream: upstream.name,
      route: this.route.name,
      timeoutMs: upstream.timeoutMs,
    });
    // Before the head: the problem answer. After it (the upstream died mid-body): the client is cut
    // off rather than left waiting for the rest (sendProblem destroys a started response).
    sendProblem(this.res, failure.error);
  }
}

/**
 * A chunked body goes up chunked, as it came. Given the stream itself, undici would send a body that
 * has fully arrived by the time it writes (most small ones) with a Content-Length instead; an
 * iterator keeps the length unknown. Not destroyed on return: when the upstream fails mid-upload the
 * client's connection must live on to get its 502. (A chunked DELETE goes up chunked too, so
 * http-proxy's smuggling bug, #1720, has no way in.) A Content-Length body is the IncomingMessage
 * itself: undici pipes it with backpressure, and a client that hangs up mid-upload ends it, which
 * aborts the upstream request — so does the iterator, which throws.
 */
function chunksOf(req: http.IncomingMessage): Readable {
  // dispatch() writes any (async) iterable body (client-h1 writeIterable); its types list streams only.
  return req.iterator({ destroyOnReturn: false }) as unknown as Readable;
}

/**
 * The request's headers as they go upstream, as undici's flat [name, value, …] list: no hop-by-hop
 * ones, none of the edge's refused ones (headers.ts), framing left to undici (it writes the
 * Content-Length it was given, or chunks a body of unknown length), the X-Forwarded-* of this hop.
 * Traced, the client's traceparent and tracestate are left for the upstream span's.
 */
function upstreamHeaders(
  req: http.IncomingMessage,
  target: RequestTarget,
  traced: boolean,
): string[] {
  const incoming = req.headers;
  const hop = hopByHopNames(incoming);
  const headers: string[] = [];
  for (const name in incoming) {
    if (hop.has(name) || SET_HERE.has(name)) continue;
    // A traced request's upstream span writes its own (tracing.ts); untraced, the client's go up.
    if (traced && TRACE_HEADERS.has(name)) continue;
    if (EDGE_HEADERS.has(name) && !keepsEdgeHeader(name, target)) continue;
    const value = incoming[name]!;
    if (typeof value === 'string') headers.push(name, value);
    else for (const item of value) headers.push(name, item);
  }
  const forwarded = forwardedHeaders(req, target);
  headers.push(
    'x-forwarded-for',
    forwarded['x-forwarded-for'],
    'x-forwarded-proto',
    forwarded['x-forwarded-proto'],
    'x-forwarded-host',
    forwarded['x-forwarded-host'],
  );
  return headers;
}

/** Replaces the client's Content-Length (a rewritten body has its own); Transfer-Encoding is hop-by-hop. */
function setContentLength(headers: string[], length: number): void {
  for (let i = headers.length - 2; i >= 0; i -= 2)
    if (headers[i] === 'content-length') headers.splice(i, 2);
  headers.push('content-length', String(length));
}

// ---- websocket upgrades ----

/**
 * Gives a websocket handshake the headers it goes upstream with — a new object, without the
 * hop-by-hop ones except Connection/Upgrade, with the edge's X-Forwarded-* and decisions
 * (headers.ts) — and the upstream path.
 */
function prepareUpgrade(req: http.IncomingMessage, target: RequestTarget): void {
  const incoming = req.headers;
  const hop = hopByHopNames(incoming);
  const outgoing: http.IncomingHttpHeaders = {};
  for (const name in incoming) {
    if (EDGE_HEADERS.has(name) && !keepsEdgeHeader(name, target)) continue;
    if (!hop.has(name) || name === 'connection' || name === 'upgrade')
      outgoing[name] = incoming[name];
  }
  if (incoming['transfer-encoding'] !== undefined) outgoing['transfer-encoding'] = 'chunked';
  const forwarded = forwardedHeaders(req, target);
  outgoing['x-forwarded-for'] = forwarded['x-forwarded-for'];
  outgoing['x-forwarded-proto'] = forwarded['x-forwarded-proto'];
  outgoing['x-forwarded-host'] = forwarded['x-forwarded-host'];
  req.headers = outgoing;
  req.url = target.forwardPath;
}
