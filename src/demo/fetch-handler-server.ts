// Serves an MCP SDK v2 fetch handler (createMcpHandler: revision 2026-07-28, stateless) on
// node:http, as the MCP demo's report server needs and the tests' SDK v2 servers use. A client
// that hangs up aborts its request's signal: over HTTP that is how 2026-07-28 cancels a call.
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface FetchHandlerServer {
  readonly server: http.Server;
  /** http://127.0.0.1:<port> */
  readonly origin: string;
}

/**
 * Listens on 127.0.0.1 at port 0; `received` sees each request with its body before the handler
 * does. The caller closes the handler and the server.
 */
export async function serveFetchHandler(
  handler: { fetch(request: Request): Promise<Response> },
  received: (req: http.IncomingMessage, body: Buffer) => void = () => undefined,
): Promise<FetchHandlerServer> {
  const server = http.createServer((req, res) => {
    void (async () => {
      const chunks: Buffer[] = [];
      for await (const chunk of req) chunks.push(chunk as Buffer);
      const body = Buffer.concat(chunks);
      received(req, body);
      const hangUp = new AbortController();
      res.on('close', () => {
        if (!res.writableFinished) hangUp.abort();
      });
      const headers = new Headers();
      for (const [name, value] of Object.entries(req.headers))
        if (typeof value === 'string') headers.set(name, value);
      const answer = await handler.fetch(
        new Request(`http://127.0.0.1${req.url ?? '/'}`, {
          method: req.method ?? 'GET',
          headers,
          body: body.length > 0 ? body : undefined,
          signal: hangUp.signal,
        }),
      );
      res.writeHead(answer.status, Object.fromEntries(answer.headers));
      if (answer.body) for await (const chunk of answer.body) res.write(chunk);
      res.end();
    })().catch(() => {
      if (!res.headersSent) res.writeHead(500);
      res.end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}
