// The websocket proxy's target, made with the WHATWG URL parser (url.parse() is deprecated, DEP0169):
// what http-proxy builds from it for the upstream request — where it connects and the Host header —
// is what it built from url.parse()'s result, for a port, a default port and an IPv6 literal.
import type http from 'node:http';
import { webSocketTarget } from '../../src/upstream/passthrough';

interface Outgoing {
  hostname?: string;
  port?: number | string;
  path?: string;
  headers: http.OutgoingHttpHeaders;
}

// http-proxy's own request builder, as the websocket pass calls it (no types are published for it).
// eslint-disable-next-line @typescript-eslint/no-require-imports
const common = require('http-proxy/lib/http-proxy/common') as {
  setupOutgoing(outgoing: object, options: object, req: object): Outgoing;
};

function upstreamRequest(origin: string) {
  const options = {
    target: webSocketTarget(origin),
    changeOrigin: true,
    prependPath: false,
    toProxy: true,
  };
  const req = { url: '/socket?room=1', method: 'GET', headers: { host: 'proxy.local:8080' } };
  const out = common.setupOutgoing({}, options, req);
  return { hostname: out.hostname, port: out.port, path: out.path, host: out.headers.host };
}

test.each([
  [
    'http://127.0.0.1:4000',
    { hostname: '127.0.0.1', port: '4000', path: '/socket?room=1', host: '127.0.0.1:4000' },
  ],
  [
    'http://api.internal',
    { hostname: 'api.internal', port: 80, path: '/socket?room=1', host: 'api.internal' },
  ],
  [
    'https://api.internal',
    { hostname: 'api.internal', port: 443, path: '/socket?room=1', host: 'api.internal' },
  ],
  [
    'https://[::1]:8443',
    { hostname: '::1', port: '8443', path: '/socket?room=1', host: '[::1]:8443' },
  ],
])('%s: connects and names the host as url.parse() had it', (origin, expected) => {
  expect(upstreamRequest(origin)).toEqual(expected);
});
