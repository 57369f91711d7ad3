// The fixture upstream the anyonce vectors are written against (anyonce/README.md): a plain HTTP
// service with no idempotency of its own, whose one shared counter proves how many times a POST
// handler really ran behind the proxy.
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface FixtureUpstream {
  readonly url: string;
  readonly port: number;
  /** POST handler invocations since the last reset, as GET /counter reports them. */
  count(): number;
  close(): Promise<void>;
}

/** Largest `/large?bytes=N` served, so a typo in a vector cannot exhaust the test process. */
const MAX_LARGE_BYTES = 64 * 1024 * 1024;
/** Longest `/slow?ms=N`, well under jest's test timeout. */
const MAX_SLOW_MS = 30_000;

export async function startFixtureUpstream(): Promise<FixtureUpstream> {
  let counter = 0;

  function handle(req: http.IncomingMessage, res: http.ServerResponse, body: Buffer): void {
    const url = new URL(req.url ?? '/', 'http://fixture');
    const path = url.pathname;
    // The two controls: GET /counter is read through the proxy, POST /reset is sent here directly.
    if (req.method === 'GET' && path === '/counter') {
      return reply(res, 200, 'application/json', JSON.stringify({ count: counter }));
    }
    if (req.method === 'POST' && path === '/reset') {
      counter = 0;
      return reply(res, 204, 'text/plain', '');
    }
    if (req.method !== 'POST') return reply(res, 404, 'text/plain', `no fixture route ${path}`);

    if (path === '/echo') {
      counter++;
      const contentType = req.headers['content-type'] ?? 'application/octet-stream';
      return reply(res, 201, contentType, body);
    }
    const status = /^\/status\/(\d{3})$/.exec(path);
    if (status) {
      const code = Number(status[1]);
      if (code < 200) return reply(res, 400, 'text/plain', `status ${code} is not a final status`);
      counter++;
      return reply(res, code, 'text/plain', `status:${code}`);
    }
    if (path === '/slow') {
      const ms = integerParam(url, 'ms', MAX_SLOW_MS);
      if (ms === undefined) return badParam(res, 'ms', MAX_SLOW_MS);
      // Counted when the handler starts, so an in-flight original is visible to a group's check.
      counter++;
      setTimeout(() => reply(res, 200, 'text/plain', `slept:${ms}`), ms);
      return;
    }
    if (path === '/large') {
      const bytes = integerParam(url, 'bytes', MAX_LARGE_BYTES);
      if (bytes === undefined) return badParam(res, 'bytes', MAX_LARGE_BYTES);
      counter++;
      return reply(res, 200, 'application/octet-stream', Buffer.alloc(bytes, 'x'));
    }
    return reply(res, 404, 'text/plain', `no fixture route ${path}`);
  }

  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => handle(req, res, Buffer.concat(chunks)));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    count: () => counter,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

function integerParam(url: URL, name: string, max: number): number | undefined {
  const value = url.searchParams.get(name);
  if (value === null || !/^\d+$/.test(value) || Number(value) > max) return undefined;
  return Number(value);
}

function badParam(res: http.ServerResponse, name: string, max: number): void {
  reply(res, 400, 'text/plain', `expected ?${name}= an integer from 0 to ${max}`);
}

function reply(
  res: http.ServerResponse,
  status: number,
  contentType: string,
  body: string | Buffer,
): void {
  // 204 and 304 carry no body and no framing headers (RFC 9110 §6.4.1).
  if (status === 204 || status === 304) {
    res.writeHead(status);
    res.end();
    return;
  }
  const bytes = Buffer.from(body);
  res.writeHead(status, { 'content-type': contentType, 'content-length': bytes.length });
  res.end(bytes);
}
