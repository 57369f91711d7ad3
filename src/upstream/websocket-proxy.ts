// Proxies a websocket upgrade to one upstream with http-proxy-3 (the maintained rewrite of
// http-proxy, whose 1.18 called url.parse() and util._extend(), deprecated on Node 24 and 26): the
// handshake goes up as an http(s).request through the upstream's keep-alive agent (and so its TLS
// settings), the upstream's 101 comes back with its headers, then the two sockets are piped both
// ways, kept open (no idle timeout, no Nagle delay, TCP keep-alive). An answer other than 101 goes
// back to the client with its status, headers and body (one without a Content-Length re-framed as
// chunked, as HTTP/1.1 allows), and the client is then disconnected.
import type http from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { createProxyServer, type ProxyServer } from 'http-proxy-3';

/** Where an upgrade goes, read once from the upstream's origin. */
export interface WebSocketTarget {
  readonly tls: boolean;
  /** To connect to: an IPv6 literal without its brackets, as http.request wants it. */
  readonly hostname: string;
  /** The protocol's default port when the origin names none. */
  readonly port: number;
  /** The Host header the upstream gets: its own authority, as the pass-through sends. */
  readonly host: string;
}

export function webSocketTarget(origin: string): WebSocketTarget {
  const url = new URL(origin);
  const tls = url.protocol === 'https:';
  return {
    tls,
    hostname: url.hostname.replace(/^\[(.*)\]$/, '$1'),
    port: url.port === '' ? (tls ? 443 : 80) : Number(url.port),
    host: url.host,
  };
}

export class WebSocketProxy {
  private readonly proxy: ProxyServer;

  constructor(origin: string, agent: http.Agent, rejectUnauthorized: boolean) {
    const target = webSocketTarget(origin);
    this.proxy = createProxyServer({
      target: new URL(origin),
      agent,
      ws: true,
      // The path is the one prepareUpgrade (passthrough.ts) made: sent as it is, not re-parsed.
      toProxy: true,
      prependPath: false,
      // The upstream's own authority, as the pass-through sends.
      headers: { host: target.host },
      // The agent holds the TLS settings; http-proxy-3 sets this one on the request itself.
      secure: rejectUnauthorized,
    });
  }

  /**
   * Proxies `req`, whose headers and url are already what the upstream gets (passthrough.ts
   * prepareUpgrade). `onError` hears a failure to connect and a socket error after the switch; the
   * client's socket is ended after it.
   */
  relay(
    req: http.IncomingMessage,
    socket: Duplex,
    head: Buffer,
    onError: (error: Error) => void,
  ): void {
    this.proxy.ws(req, socket as Socket, head, undefined, (error) => onError(error as Error));
  }

  close(): void {
    this.proxy.close();
  }
}
