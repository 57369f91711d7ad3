// A real HTTP upstream on port 0 that records what it received, for asserting both sides of the proxy.
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface ReceivedRequest {
  readonly method: string;
  readonly url: string;
  readonly headers: http.IncomingHttpHeaders;
  readonly rawHeaders: string[];
  readonly body: Buffer;
}

export type UpstreamHandler = (
  req: ReceivedRequest,
  res: http.ServerResponse,
  raw: http.IncomingMessage,
) => void | Promise<void>;

export interface TestUpstream {
  readonly url: string;
  readonly port: number;
  readonly received: ReceivedRequest[];
  /** Received requests whose method is not GET/HEAD/OPTIONS: the executions that matter. */
  executions(): ReceivedRequest[];
  readonly server: http.Server;
  close(): Promise<void>;
}

export async function startUpstream(
  handler: UpstreamHandler = defaultHandler,
): Promise<TestUpstream> {
  const received: ReceivedRequest[] = [];
  const server = http.createServer((raw, res) => {
    const chunks: Buffer[] = [];
    raw.on('data', (chunk: Buffer) => chunks.push(chunk));
    raw.on('end', () => {
      const req: ReceivedRequest = {
        method: raw.method ?? '',
        url: raw.url ?? '',
        headers: raw.headers,
        rawHeaders: raw.rawHeaders,
        body: Buffer.concat(chunks),
      };
      received.push(req);
      Promise.resolve(handler(req, res, raw)).catch((error: unknown) => {
        res.destroy(error as Error);
      });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    received,
    executions: () => received.filter((r) => !['GET', 'HEAD', 'OPTIONS'].includes(r.method)),
    server,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** 201 with a JSON body naming the execution number, echoing method, url and body. */
let executionCounter = 0;
function defaultHandler(req: ReceivedRequest, res: http.ServerResponse): void {
  executionCounter++;
  const body = JSON.stringify({
    execution: executionCounter,
    method: req.method,
    url: req.url,
    body: req.body.toString('utf8'),
  });
  res.writeHead(201, { 'content-type': 'application/json', 'x-upstream': 'yes' });
  res.end(body);
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** An upstream that answers 201 `done <url>` after the milliseconds in the request's x-wait header. */
export function startWaitingUpstream(): Promise<TestUpstream> {
  return startUpstream(async (req, res) => {
    await sleep(Number(req.headers['x-wait'] ?? 0));
    res.writeHead(201, { 'content-type': 'text/plain' });
    res.end(`done ${req.url}`);
  });
}

/** An upstream that counts its executions per Idempotency-Key (what fault tests compare against). */
export type CountingUpstream = TestUpstream & { runs(key: string): number };

/**
 * Answers 201 `{ key, execution, pad }` after `delayMs`, counting executions per key; `padBytes` of
 * padding give the answer a size (for bounds in bytes).
 */
export async function startSlowCountingUpstream(
  delayMs: number,
  padBytes = 0,
): Promise<CountingUpstream> {
  const runs = new Map<string, number>();
  const upstream = await startUpstream(async (req, res) => {
    const key = String(req.headers['idempotency-key'] ?? '');
    const n = (runs.get(key) ?? 0) + 1;
    runs.set(key, n);
    await sleep(delayMs);
    res.writeHead(201, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ key, execution: n, pad: 'x'.repeat(padBytes) }));
  });
  return Object.assign(upstream, { runs: (key: string) => runs.get(key) ?? 0 });
}
