// The Node floor: the smallest honest forwarder over undici — one Pool, the request body streamed up
// (the IncomingMessage is the body), the answer streamed down through pool.stream (undici's API for
// proxying: no Readable of its own between the socket and `res`), status and headers copied as undici
// parsed them. No routing, no header hygiene, no timeouts, no logging. Our pass-through route is
// measured against this and against the bare http-proxy.
// Started by run-bench with an IPC channel; sends {type:'ready', port}. Env: BENCH_TARGET, BENCH_PORT.
import http from 'node:http';
import { Pool } from 'undici';
import { serveHelper } from './helper-process';

const pool = new Pool(process.env.BENCH_TARGET as string);

const server = http.createServer((req, res) => {
  pool.stream(
    { method: req.method as 'POST', path: req.url as string, headers: req.headers, body: req },
    ({ statusCode, headers }) => {
      res.writeHead(statusCode, headers);
      return res;
    },
    (error) => {
      if (!error) return;
      if (!res.headersSent) res.writeHead(502);
      res.end();
    },
  );
});
serveHelper(server);
