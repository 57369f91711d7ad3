// Where the websocket relay connects and the Host header it sends, read from an upstream's origin
// with the WHATWG parser: a port, a protocol's default port, and an IPv6 literal (its brackets off
// to connect, kept in Host).
import { webSocketTarget } from '../../src/upstream/websocket-proxy';

test.each([
  [
    'http://127.0.0.1:4000',
    { tls: false, hostname: '127.0.0.1', port: 4000, host: '127.0.0.1:4000' },
  ],
  ['http://api.internal', { tls: false, hostname: 'api.internal', port: 80, host: 'api.internal' }],
  [
    'https://api.internal',
    { tls: true, hostname: 'api.internal', port: 443, host: 'api.internal' },
  ],
  ['https://[::1]:8443', { tls: true, hostname: '::1', port: 8443, host: '[::1]:8443' }],
])('%s', (origin, expected) => {
  expect(webSocketTarget(origin)).toEqual(expected);
});
