// The upstream under test, as its own process: a minimal keep-alive HTTP server. Any POST is
// answered 201 with a small JSON body once its request body has been read; anything else gets 200.
// POST /slow is held open until GET /release-slow (or 10 minutes): the 409 storm needs one request
// that stays in flight for the whole scenario.
// Started by run-bench with an IPC channel; sends {type:'ready', port}. Env: BENCH_PORT (0 = any).
import http from 'node:http';
import { serveHelper } from './helper-process';

const MAX_HOLD_MS = 10 * 60_000;
const held = new Set<http.ServerResponse>();
let created = 0;

function answer(res: http.ServerResponse, status: number, payload: string): void {
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(payload),
  });
  res.end(payload);
}

function created201(res: http.ServerResponse): void {
  created++;
  answer(res, 201, `{"id":"re_${created}","status":"created"}`);
}

const server = http.createServer((req, res) => {
  req.resume();
  req.once('end', () => {
    if (req.method === 'POST' && req.url?.startsWith('/slow')) {
      held.add(res);
      const timer = setTimeout(() => release(res), MAX_HOLD_MS);
      res.once('close', () => {
        clearTimeout(timer);
        held.delete(res);
      });
      return;
    }
    if (req.url === '/release-slow') {
      const count = held.size;
      for (const waiting of [...held]) release(waiting);
      return answer(res, 200, `{"released":${count}}`);
    }
    if (req.method === 'POST') return created201(res);
    answer(res, 200, '{"ok":true}');
  });
});

function release(res: http.ServerResponse): void {
  held.delete(res);
  if (!res.writableEnded) created201(res);
}

// Longer than any client's idle timeout: the proxy's pools must never race an upstream close.
server.keepAliveTimeout = 65_000;
server.headersTimeout = 66_000;

serveHelper(server);
