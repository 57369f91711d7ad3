// Pass-through routes (and safe methods on protected routes) go through http-proxy: streamed both
// ways, keep-alive agents per upstream, websocket upgrades, transport errors mapped to 502/504.
import http from 'node:http';
import { parse as urlParse } from 'node:url';
import https from 'node:https';
import type { Duplex } from 'node:stream';
import httpProxy from 'http-proxy';
import type { RouteConfig, UpstreamConfig } from '../config/types';
import { forwardedHeaders, hopByHopNames } from '../http/headers';
import { sendProblem } from '../http/problem';
import { classifyTransportError } from './transport-errors';

export class PassThrough {
  private readonly proxy: httpProxy;
  private readonly agents = new Map<string, http.Agent>();
  private readonly options = new Map<string, httpProxy.ServerOptions>();

  constructor(upstreams: Iterable<UpstreamConfig>) {
    for (const upstream of upstreams) {
      const options = { keepAlive: true, keepAliveMsecs: 1_000, maxFreeSockets: 256 };
      this.agents.set(
        upstream.name,
        upstream.origin.startsWith('https:') ? new https.Agent(options) : new http.Agent(options),
      );
    }
    this.proxy = httpProxy.createProxyServer({ ws: true, changeOrigin: true, prependPath: false });
    // http-proxy 1.18.1 turns a chunked DELETE/OPTIONS body into `content-length: 0` while still piping
    // the body upstream, so the body is parsed as a second request (node-http-proxy #1720/#1721:
    // request smuggling). Drop that pass: a chunked body then stays chunked.
    const passes = (this.proxy as unknown as { webPasses: { name: string }[] }).webPasses;
    const index = passes.findIndex((pass) => pass.name === 'deleteLength');
    if (index === -1)
      throw new Error(
        'http-proxy changed: deleteLength pass not found; re-check the smuggling guard',
      );
    passes.splice(index, 1);

    this.proxy.on('proxyRes', (proxyRes, _req, res) => {
      for (const name of hopByHopNames(proxyRes.headers)) delete proxyRes.headers[name];
      // Our hop's Connection header is ours to decide: http-proxy would otherwise send `keep-alive` and
      // keep the socket open even for a client that asked for `Connection: close`.
      proxyRes.headers.connection = res.shouldKeepAlive ? 'keep-alive' : 'close';
    });
    // http-proxy aborts a request that hit proxyTimeout, which surfaces as a plain ECONNRESET; remember
    // the timeout so the client gets a 504 rather than a 502.
    this.proxy.on('proxyReq', (proxyReq, req) => {
      proxyReq.once('timeout', () => ((req as RequestWithRoute).upstreamTimedOut = true));
    });
    // Errors reach the per-request callbacks given to web() and ws(), never this emitter.
  }

  web(req: http.IncomingMessage, res: http.ServerResponse, route: RouteConfig, path: string): void {
    prepareRequest(req, path, false);
    this.proxy.web(req, res, this.optionsFor(route), (error) =>
      this.onError(error, route, req, res),
    );
  }

  ws(
    req: http.IncomingMessage,
    socket: Duplex,
    head: Buffer,
    route: RouteConfig,
    path: string,
  ): void {
    prepareRequest(req, path, true);
    this.proxy.ws(req, socket, head, this.optionsFor(route), () => socket.destroy());
  }

  close(): void {
    this.proxy.close();
    for (const agent of this.agents.values()) agent.destroy();
  }

  /** Options per upstream, built once: the target pre-parsed, so http-proxy does not parse it per request. */
  private optionsFor(route: RouteConfig): httpProxy.ServerOptions {
    let options = this.options.get(route.upstream.name);
    if (!options) {
      options = {
        target: urlParse(route.upstream.origin) as unknown as httpProxy.ProxyTargetUrl,
        agent: this.agents.get(route.upstream.name),
        proxyTimeout: route.upstream.timeoutMs,
      };
      this.options.set(route.upstream.name, options);
    }
    return options;
  }

  private onError(
    error: Error,
    route: RouteConfig,
    req: http.IncomingMessage,
    target: http.ServerResponse,
  ): void {
    const timedOut = (req as RequestWithRoute).upstreamTimedOut === true;
    const failure = classifyTransportError(
      timedOut ? Object.assign(error, { code: 'ETIMEDOUT' }) : error,
      {
        upstream: route.upstream.name,
        route: route.name,
        timeoutMs: route.upstream.timeoutMs,
      },
    );
    sendProblem(target, failure.error);
  }
}

interface RequestWithRoute extends http.IncomingMessage {
  upstreamTimedOut?: boolean;
}

/** Rewrites the request in place for http-proxy: upstream path, no hop-by-hop, X-Forwarded-*. */
function prepareRequest(req: http.IncomingMessage, path: string, upgrade: boolean): void {
  const headers = req.headers;
  const forwarded = forwardedHeaders(req);
  for (const name of hopByHopNames(headers)) {
    // A websocket handshake needs its own Connection/Upgrade; everything else hop-by-hop goes.
    if (upgrade && (name === 'connection' || name === 'upgrade')) continue;
    if (name === 'transfer-encoding') continue; // the body framing of this very request: Node re-frames it
    delete headers[name];
  }
  Object.assign(headers, forwarded);
  req.url = path;
}
