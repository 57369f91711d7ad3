// A tiny client over node:http so tests control header spelling and see raw responses.
import http from 'node:http';

export interface TestResponse {
  readonly status: number;
  readonly headers: http.IncomingHttpHeaders;
  readonly body: Buffer;
  text(): string;
  json<T = Record<string, unknown>>(): T;
}

export interface TestRequest {
  method?: string;
  headers?: Record<string, string | string[]>;
  body?: string | Buffer;
  /** Send the body with Transfer-Encoding: chunked instead of Content-Length. */
  chunked?: boolean;
  /** The agent to send through (one keeping connections open); by default a new connection each. */
  agent?: http.Agent;
}

const agent = new http.Agent({ keepAlive: false });

export function send(url: string, request: TestRequest = {}): Promise<TestResponse> {
  return new Promise((resolve, reject) => {
    const body = request.body === undefined ? undefined : Buffer.from(request.body);
    const headers: Record<string, string | string[]> = { ...request.headers };
    if (body !== undefined && !request.chunked) headers['content-length'] = String(body.length);
    if (request.chunked) headers['transfer-encoding'] = 'chunked';
    const options = { method: request.method ?? 'POST', headers, agent: request.agent ?? agent };
    const req = http.request(url, options, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => {
        const bytes = Buffer.concat(chunks);
        resolve({
          status: res.statusCode ?? 0,
          headers: res.headers,
          body: bytes,
          text: () => bytes.toString('utf8'),
          json: <T>() => JSON.parse(bytes.toString('utf8')) as T,
        });
      });
      res.on('error', reject);
    });
    req.on('error', reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}

export function postJson(
  url: string,
  key: string | undefined,
  value: unknown,
  headers: Record<string, string> = {},
  agent?: http.Agent,
): Promise<TestResponse> {
  return send(url, {
    ...(agent ? { agent } : {}),
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      ...(key === undefined ? {} : { 'idempotency-key': key }),
      ...headers,
    },
    body: JSON.stringify(value),
  });
}
