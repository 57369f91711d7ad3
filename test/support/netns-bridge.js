// Relays TCP connections between a TCP address and a Unix socket, so a test in the root network
// namespace can reach a process inside a namespace of its own (and back) without giving the root
// namespace an address: Unix sockets live in the file system, which namespaces share.
// As a script (run inside a namespace with `ip netns exec`): node netns-bridge.js LISTEN=TARGET ...
// where each side is tcp:HOST:PORT or unix:PATH; prints "ready" once every listener is up.
/* global require, module, process, setTimeout */
/* eslint-disable @typescript-eslint/no-require-imports -- a plain CommonJS script */
'use strict';
const fs = require('node:fs');
const net = require('node:net');

/** @param {string} spec */
function address(spec) {
  if (spec.startsWith('unix:')) return { path: spec.slice(5) };
  const [, host, port] = spec.split(':');
  return { host, port: Number(port) };
}

/**
 * Relays `from` to `to` with every chunk held back `delayMs` ± `jitterMs` (a network's latency, for
 * kernels without tc netem), in order: a chunk never overtakes the one before it.
 * @param {import('node:net').Socket} from
 * @param {import('node:net').Socket} to
 * @param {{ delayMs: number, jitterMs: number }} delay
 */
function relayDelayed(from, to, delay) {
  let last = 0;
  from.on('data', (chunk) => {
    const wanted = Date.now() + delay.delayMs + (Math.random() * 2 - 1) * delay.jitterMs;
    last = Math.max(last, wanted);
    setTimeout(() => {
      if (!to.destroyed) to.write(chunk);
    }, last - Date.now());
  });
  from.on('end', () => setTimeout(() => to.end(), Math.max(0, last - Date.now())));
}

/**
 * @param {string} listen tcp:HOST:PORT (port 0 picks one) or unix:PATH
 * @param {string | (() => string)} target tcp:HOST:PORT or unix:PATH; a function is asked at each
 *   connection, so the target can be switched (connections made before stay where they are)
 * @param {{ delayMs: number, jitterMs: number }} [delay] added latency each way
 * @returns {Promise<{ port: number | undefined, close(): Promise<void> }>}
 */
function startBridge(listen, target, delay) {
  const sockets = new Set();
  const pairs = new Set();
  const server = net.createServer((client) => {
    const upstream = net.connect(address(typeof target === 'function' ? target() : target));
    sockets.add(client).add(upstream);
    pairs.add([client, upstream]);
    const drop = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    if (delay) {
      relayDelayed(client, upstream, delay);
      relayDelayed(upstream, client, delay);
      return;
    }
    client.pipe(upstream);
    upstream.pipe(client);
  });
  const at = address(listen);
  if (at.path) fs.rmSync(at.path, { force: true });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    const ready = () => {
      const bound = server.address();
      resolve({
        port: typeof bound === 'object' && bound ? bound.port : undefined,
        // Stops relaying on the connections open now: what is sent meanwhile stays in their buffers
        // (a replication link that lags), until `drop` discards it.
        hold: () => {
          for (const [client, upstream] of pairs) {
            client.unpipe(upstream);
            upstream.unpipe(client);
            client.pause();
            upstream.pause();
          }
        },
        drop: () => {
          for (const socket of sockets) socket.destroy();
        },
        close: () =>
          new Promise((done) => {
            for (const socket of sockets) socket.destroy();
            server.close(() => done());
          }),
      });
    };
    if (at.path) server.listen(at.path, ready);
    else server.listen(at.port, at.host, ready);
  });
}

module.exports = { startBridge };

if (require.main === module) {
  Promise.all(
    process.argv.slice(2).map((pair) => {
      // LISTEN=TARGET, or LISTEN=TARGET=DELAY_MS:JITTER_MS for added latency each way.
      const [listen, target, latency] = pair.split('=');
      const [delayMs, jitterMs] = (latency ?? '').split(':').map(Number);
      return startBridge(
        listen,
        target,
        latency ? { delayMs, jitterMs: jitterMs || 0 } : undefined,
      );
    }),
  ).then(
    () => process.stdout.write('ready\n'),
    (error) => {
      process.stderr.write(`${error.stack}\n`);
      process.exit(1);
    },
  );
  process.on('SIGTERM', () => process.exit(0));
}
