// Pass-through routes (and safe methods on protected routes) go through http-proxy: streamed both
// ways, keep-alive agents per upstream, websocket upgrades, transport errors mapped to 502/504.
// One ProxyServer per upstream, its options fixed at start, so a request costs http-proxy no option
// merge and no URL parse; the response head is written by us in one call (see writeResponseHead).
import http from 'node:http';
import https from 'node:https';
import type { Duplex } from 'node:stream';
import { parse as urlParse } from 'node:url';
import httpProxy from 'http-proxy';
import type { RouteConfig, UpstreamConfig } from '../config/types';
import { EDGE_HEADERS, forwardedHeaders, hopByHopNames, keepsEdgeHeader } from '../http/headers';
import type { RequestTarget } from '../http/router';
import { sendProblem } from '../http/problem';
import { classifyTransportError } from './transport-errors';

/**
 * http-proxy's web()/ws() also take (req, res, callback) with no per-call options — then it skips
 * the per-request option merge — but its types do not say so.
 */
interface UpstreamProxy {
  close(): void;
  web(req: http.IncomingMessage, res: http.ServerResponse, callback: (error: Error) => void): void;
  ws(req: http.IncomingMessage, socket: Duplex, head: Buffer, callback: () => void): void;
}

export class PassThrough {
  private readonly proxies = new Map<string, UpstreamProxy>();
  private readonly agents: http.Agent[] = [];

  constructor(upstreams: Iterable<UpstreamConfig>) {
    for (const upstream of upstreams) {
      const settings = { keepAlive: true, keepAliveMsecs: 1_000, maxFreeSockets: 256 };
      const agent = upstream.origin.startsWith('https:')
        ? new https.Agent(settings)
        : new http.Agent(settings);
      this.agents.push(agent);
      this.proxies.set(upstream.name, createUpstreamProxy(upstream, agent));
    }
  }

  web(
    req: http.IncomingMessage,
    res: http.ServerResponse,
    route: RouteConfig,
    target: RequestTarget,
  ): void {
    prepareRequest(req, target, false);
    this.proxyFor(route).web(req, res, (error) => this.onError(error, route, res));
  }

  ws(
    req: http.IncomingMessage,
    socket: Duplex,
    head: Buffer,
    route: RouteConfig,
    target: RequestTarget,
  ): void {
    prepareRequest(req, target, true);
    this.proxyFor(route).ws(req, socket, head, () => socket.destroy());
  }

  close(): void {
    for (const proxy of this.proxies.values()) proxy.close();
    for (const agent of this.agents) agent.destroy();
  }

  private proxyFor(route: RouteConfig): UpstreamProxy {
    const proxy = this.proxies.get(route.upstream.name);
    if (!proxy) throw new Error(`no pass-through proxy for upstream ${route.upstream.name}`);
    return proxy;
  }

  private onError(error: Error, route: RouteConfig, target: http.ServerResponse): void {
    const failure = classifyTransportError(error, {
      upstream: route.upstream.name,
      route: route.name,
      timeoutMs: route.upstream.timeoutMs,
    });
    sendProblem(target, failure.error);
  }
}

function createUpstreamProxy(upstream: UpstreamConfig, agent: http.Agent): UpstreamProxy {
  const proxy = httpProxy.createProxyServer({
    target: urlParse(upstream.origin) as unknown as httpProxy.ProxyTargetUrl,
    agent,
    ws: true,
    changeOrigin: true,
    prependPath: false,
    // req.url already holds the upstream path (prepareRequest): use it as is, no url.parse per request.
    toProxy: true,
    // We write the response head ourselves, in one call, without http-proxy's per-header passes.
    selfHandleResponse: true,
  });
  // http-proxy 1.18.1 turns a chunked DELETE/OPTIONS body into `content-length: 0` while still piping
  // the body upstream, so the body is parsed as a second request (node-http-proxy #1720/#1721:
  // request smuggling). Drop that pass: a chunked body then stays chunked.
  const passes = (proxy as unknown as { webPasses: { name: string }[] }).webPasses;
  const index = passes.findIndex((pass) => pass.name === 'deleteLength');
  if (index === -1)
    throw new Error(
      'http-proxy changed: deleteLength pass not found; re-check the smuggling guard',
    );
  passes.splice(index, 1);

  const timeoutMs = upstream.timeoutMs;
  // An upstream silent for the timeout is a 504, not the 502 a plain abort would look like: the
  // request is destroyed with an ETIMEDOUT error, which reaches web()'s callback.
  proxy.on('proxyReq', (proxyReq, req) => {
    // http-proxy joins paths with its urlJoin, which merges "//" and rewrites "http:/" to "http://"
    // inside a path: the upstream must get the path the edge decided on (SPEC §8), byte for byte.
    // The request line is written later, from this field.
    if (proxyReq.path !== req.url) proxyReq.path = req.url!;
    proxyReq.setTimeout(timeoutMs, () => proxyReq.destroy(upstreamTimeout(timeoutMs)));
  });
  proxy.on('proxyRes', (proxyRes, _req, res) => {
    writeResponseHead(proxyRes, res as http.ServerResponse);
    proxyRes.pipe(res);
    // An upstream that dies mid-body would leave the client waiting for the rest: cut it off too.
    proxyRes.once('close', () => {
      if (!proxyRes.complete) res.destroy();
    });
  });
  // Errors reach the per-request callbacks given to web() and ws(), never this emitter.
  return proxy as unknown as UpstreamProxy;
}

function upstreamTimeout(ms: number): Error {
  return Object.assign(new Error(`upstream sent nothing for ${ms} ms`), { code: 'ETIMEDOUT' });
}

/**
 * Copies the upstream's status and headers to the client in one writeHead, from the raw header list
 * (repeated headers stay repeated), leaving out hop-by-hop ones. Our hop's Connection header is ours
 * to decide: `close` when the client asked for it.
 */
function writeResponseHead(proxyRes: http.IncomingMessage, res: http.ServerResponse): void {
  const hop = hopByHopNames(proxyRes.headers);
  const raw = proxyRes.rawHeaders;
  const headers: string[] = [];
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!;
    if (!hop.has(name.toLowerCase())) headers.push(name, raw[i + 1]!);
  }
  headers.push('connection', res.shouldKeepAlive ? 'keep-alive' : 'close');
  res.writeHead(proxyRes.statusCode ?? 502, proxyRes.statusMessage, headers);
}

/**
 * Gives the request the headers it goes upstream with — a new object, without the hop-by-hop ones,
 * with the edge's X-Forwarded-* and decisions (headers.ts) — and the upstream path. A websocket
 * handshake keeps Connection/Upgrade.
 */
function prepareRequest(req: http.IncomingMessage, target: RequestTarget, upgrade: boolean): void {
  const incoming = req.headers;
  const hop = hopByHopNames(incoming);
  const outgoing: http.IncomingHttpHeaders = {};
  for (const name in incoming) {
    if (EDGE_HEADERS.has(name) && !keepsEdgeHeader(name, target)) continue;
    if (!hop.has(name) || (upgrade && (name === 'connection' || name === 'upgrade')))
      outgoing[name] = incoming[name];
  }
  // Node has decoded this request's chunked framing and re-chunks the body on the way out: say so,
  // and only so (the edge refused any coding but chunked; a client's "identity, chunked" is not ours).
  if (incoming['transfer-encoding'] !== undefined) outgoing['transfer-encoding'] = 'chunked';
  const forwarded = forwardedHeaders(req, target);
  outgoing['x-forwarded-for'] = forwarded['x-forwarded-for'];
  outgoing['x-forwarded-proto'] = forwarded['x-forwarded-proto'];
  outgoing['x-forwarded-host'] = forwarded['x-forwarded-host'];
  req.headers = outgoing;
  req.url = target.forwardPath;
}
