// POSTs exact bytes to an MCP route (node:http adds nothing but Host and Content-Length), with the
// headers an MCP client sends, for the tests of what the proxy reads and refuses to read.
import http from 'node:http';

export interface RawAnswer {
  readonly status: number;
  readonly headers: http.IncomingHttpHeaders;
  readonly json: Record<string, unknown>;
}

export function postRawMcp(
  url: string,
  body: Buffer,
  headers: Record<string, string> = {},
): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      url,
      {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          'mcp-protocol-version': '2025-06-18',
          authorization: 'Bearer tenant-a',
          'content-length': String(body.length),
          ...headers,
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => {
          resolve({
            status: res.statusCode ?? 0,
            headers: res.headers,
            json: jsonOf(Buffer.concat(chunks).toString()),
          });
        });
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/** The answer as JSON; `{ text }` for one that is not (a server's HTML error page). */
export function jsonOf(text: string): Record<string, unknown> {
  try {
    return text ? (JSON.parse(text) as Record<string, unknown>) : {};
  } catch {
    return { text };
  }
}
