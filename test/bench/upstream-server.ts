// The upstream under test, as its own process: a minimal keep-alive HTTP server. Any POST is
// answered 201 with a small JSON body once its request body has been read; anything else gets 200.
// POST /slow is held open until GET /release-slow (or 10 minutes): the 409 storm needs one request
// that stays in flight for the whole scenario.
// POST /stream answers an event stream: `events` events (default 20) `every` ms apart (default 20),
// each carrying the moment it was sent (performance.timeOrigin + now, comparable across processes
// on one machine), for the streams measurement (measure-streams.ts).
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
    // /stream and /stream-attach (the proxy's route with onConcurrent: attach)
    if (req.method === 'POST' && req.url?.startsWith('/stream')) return stream(req, res);
    if (req.method === 'POST') return created201(res);
    answer(res, 200, '{"ok":true}');
  });
});

function stream(req: http.IncomingMessage, res: http.ServerResponse): void {
  const query = new URL(req.url ?? '/', 'http://upstream').searchParams;
  const events = Number(query.get('events') ?? 20);
  const every = Number(query.get('every') ?? 20);
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store' });
  res.flushHeaders();
  let sent = 0;
  const next = (): void => {
    if (res.destroyed) return;
    const sentAt = performance.timeOrigin + performance.now();
    res.write(`id: ${sent}\ndata: {"i":${sent},"sentAt":${sentAt}}\n\n`);
    if (++sent === events) return void res.end();
    setTimeout(next, every);
  };
  next();
}

function release(res: http.ServerResponse): void {
  held.delete(res);
  if (!res.writableEnded) created201(res);
}

// Longer than any client's idle timeout: the proxy's pools must never race an upstream close.
server.keepAliveTimeout = 65_000;
server.headersTimeout = 66_000;

serveHelper(server);
