// The baseline: the forwarder a naive user would write with http-proxy — one keep-alive agent, no
// routing, no header hygiene, no logging. Our pass-through route is measured against this.
// Started by run-bench with an IPC channel; sends {type:'ready', port}. Env: BENCH_TARGET, BENCH_PORT.
import http from 'node:http';
import httpProxy from 'http-proxy';
import { serveHelper } from './helper-process';

const agent = new http.Agent({ keepAlive: true });
const proxy = httpProxy.createProxyServer({ target: process.env.BENCH_TARGET, agent });
proxy.on('error', (_error, _req, res) => {
  if (res instanceof http.ServerResponse && !res.headersSent) res.writeHead(502);
  res.end();
});

const server = http.createServer((req, res) => proxy.web(req, res));
serveHelper(server);
