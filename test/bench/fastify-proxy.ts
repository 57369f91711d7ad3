// The peer: what a Node user would pick for a reverse proxy today — fastify with @fastify/http-proxy
// (which forwards through @fastify/reply-from on undici), every path to the upstream, its defaults,
// logger off. Our pass-through route is measured against it.
// Started by run-bench with an IPC channel; sends {type:'ready', port}. Env: BENCH_TARGET, BENCH_PORT.
import http from 'node:http';
import fastifyHttpProxy from '@fastify/http-proxy';
import Fastify from 'fastify';
import { serveHelper } from './helper-process';

let server: http.Server | undefined;
const app = Fastify({
  logger: false,
  serverFactory: (handler) => {
    server = http.createServer(handler);
    return server;
  },
});
void app.register(fastifyHttpProxy, { upstream: process.env.BENCH_TARGET as string });
app.ready().then(
  () => serveHelper(server as http.Server),
  (error: unknown) => {
    process.send?.({ type: 'error', error: String(error) });
    process.exit(1);
  },
);
