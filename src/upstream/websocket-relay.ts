// Relays a websocket upgrade to one upstream: the handshake goes up as an http(s).request through
// the upstream's keep-alive agent (and so its TLS settings), the upstream's 101 comes back with its
// headers, then the two sockets are piped both ways. An answer other than 101 goes back as it came.
// The steps are http-proxy 1.18's websocket pass, which this replaces: that package is unmaintained
// and calls url.parse() and util._extend(), both deprecated (DEP0169, DEP0060), so on Node 24 and 26
// it printed a warning at start and another at the first upgrade.
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import type { Duplex } from 'node:stream';

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

export class WebSocketRelay {
  private readonly target: WebSocketTarget;

  constructor(
    origin: string,
    private readonly agent: http.Agent,
  ) {
    this.target = webSocketTarget(origin);
  }

  /**
   * Relays `req`, whose headers and url are already what the upstream gets (passthrough.ts
   * prepareUpgrade). `onError` hears a failure to connect and a socket error after the switch; the
   * client's socket is ended after it.
   */
  relay(
    req: http.IncomingMessage,
    socket: Duplex,
    head: Buffer,
    onError: (error: Error) => void,
  ): void {
    if (req.method !== 'GET' || req.headers.upgrade?.toLowerCase() !== 'websocket') {
      socket.destroy();
      return;
    }
    keepOpen(socket);
    if (head.length > 0) socket.unshift(head);
    const { tls, hostname, port, host } = this.target;
    const upstream = (tls ? https : http).request({
      agent: this.agent,
      hostname,
      port,
      method: 'GET',
      path: req.url,
      headers: { ...req.headers, host },
    });
    const fail = (error: Error): void => {
      onError(error);
      socket.end();
    };
    upstream.on('error', fail);
    // Any answer but 101 (Node reports a 101 as 'upgrade' alone): the upstream refused the switch,
    // and the client gets its answer as it came.
    upstream.on('response', (answer) => {
      socket.write(
        headBlock(
          `HTTP/${answer.httpVersion} ${answer.statusCode} ${answer.statusMessage}`,
          answer,
        ),
      );
      answer.pipe(socket);
    });
    upstream.on('upgrade', (answer, upstreamSocket, upstreamHead) => {
      upstreamSocket.on('error', fail);
      // A client that vanishes (an error, not an end) would not end the upstream through the pipe.
      socket.on('error', () => upstreamSocket.end());
      keepOpen(upstreamSocket);
      if (upstreamHead.length > 0) upstreamSocket.unshift(upstreamHead);
      socket.write(headBlock('HTTP/1.1 101 Switching Protocols', answer));
      upstreamSocket.pipe(socket).pipe(upstreamSocket);
    });
    upstream.end();
  }
}

/** A websocket lives as long as its peers want: no idle timeout, no Nagle delay, TCP keep-alive. */
function keepOpen(socket: Duplex): void {
  if (!(socket instanceof net.Socket)) return;
  socket.setTimeout(0);
  socket.setNoDelay(true);
  socket.setKeepAlive(true, 0);
}

/** A status line and the answer's headers (a repeated header once per value), then the blank line. */
function headBlock(statusLine: string, answer: http.IncomingMessage): string {
  const lines = [statusLine];
  for (const [name, value] of Object.entries(answer.headers)) {
    if (value === undefined) continue;
    for (const each of Array.isArray(value) ? value : [value]) lines.push(`${name}: ${each}`);
  }
  return `${lines.join('\r\n')}\r\n\r\n`;
}
