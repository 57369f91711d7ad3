// Raw HTTP/1.x over node:net for the edge suites: the request target, header lines and framing go
// out byte for byte as written (no client normalises `//x`, `%2e`, `\` or `#`, or adds a Host), and
// the answer is parsed here, so a test sees exactly what the proxy wrote.
import net from 'node:net';
import type { TestResponse } from './http';

export interface RawRequest {
  readonly method?: string;
  /** Sent as is, in latin1: may hold any byte. */
  readonly target: string;
  readonly version?: '1.0' | '1.1';
  /**
   * Header lines in order, exactly as spelled. A `Host` line (`127.0.0.1:<port>`) goes first unless
   * `host` says otherwise.
   */
  readonly headers?: HeaderLines;
  /** `null`: no Host line; a string: that value; default: `127.0.0.1:<port>`. */
  readonly host?: string | null;
  /** Sent after the headers; a Content-Length line is added unless `framed` (the caller framed it). */
  readonly body?: string | Buffer;
  readonly framed?: boolean;
}

export interface RawResponse extends TestResponse {
  /** Header lines as received, names in the proxy's spelling. */
  readonly rawHeaders: HeaderLines;
}

const TIMEOUT_MS = 10_000;

/** The request's bytes, as `rawRequest` would send them to a proxy on `port`. */
export function rawRequestBytes(port: number, request: RawRequest): Buffer {
  const lines = [`${request.method ?? 'POST'} ${request.target} HTTP/${request.version ?? '1.1'}`];
  const host = request.host === undefined ? `127.0.0.1:${port}` : request.host;
  if (host !== null) lines.push(`Host: ${host}`);
  for (const [name, value] of request.headers ?? []) lines.push(`${name}: ${value}`);
  const body = request.body === undefined ? undefined : Buffer.from(request.body);
  if (body !== undefined && !request.framed) lines.push(`Content-Length: ${body.length}`);
  return Buffer.concat([
    Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1'),
    body ?? Buffer.alloc(0),
  ]);
}

/** Sends one request on a fresh connection and resolves with the first complete final answer. */
export function rawRequest(port: number, request: RawRequest): Promise<RawResponse> {
  return rawExchange(port, rawRequestBytes(port, request), request.method === 'HEAD');
}

export function rawExchange(port: number, bytes: Buffer, head = false): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    let received = Buffer.alloc(0);
    let settled = false;
    const socket = net.connect(port, '127.0.0.1', () => socket.write(bytes));
    const timer = setTimeout(() => finish(new Error('no complete answer within 10s')), TIMEOUT_MS);
    const finish = (outcome: RawResponse | Error): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      if (outcome instanceof Error) reject(outcome);
      else resolve(outcome);
    };
    const attempt = (ended: boolean): void => {
      try {
        const parsed = parseResponse(received, ended, head);
        if (parsed) finish(parsed);
        else if (ended) finish(new Error(`connection closed mid-answer: ${preview(received)}`));
      } catch (error) {
        finish(error as Error);
      }
    };
    socket.on('data', (chunk: Buffer) => {
      received = Buffer.concat([received, chunk]);
      attempt(false);
    });
    socket.on('end', () => attempt(true));
    socket.on('close', () => attempt(true));
    socket.on('error', (error) => {
      // A reset after a complete answer is fine; before one it is the result.
      if (!settled) attempt(true);
      if (!settled) finish(error);
    });
  });
}

function preview(bytes: Buffer): string {
  return JSON.stringify(bytes.subarray(0, 300).toString('latin1'));
}

/** A complete final (non-1xx) answer at the start of `bytes`, or undefined if more is needed. */
function parseResponse(bytes: Buffer, ended: boolean, head: boolean): RawResponse | undefined {
  let offset = 0;
  for (;;) {
    const end = bytes.indexOf('\r\n\r\n', offset, 'latin1');
    if (end === -1) return undefined;
    const [statusLine = '', ...headerLines] = bytes
      .subarray(offset, end)
      .toString('latin1')
      .split('\r\n');
    const match = /^HTTP\/1\.[01] (\d{3})/.exec(statusLine);
    if (!match) throw new Error(`not an HTTP answer: ${preview(bytes)}`);
    const status = Number(match[1]);
    const bodyStart = end + 4;
    if (status >= 100 && status < 200) {
      offset = bodyStart;
      continue;
    }
    const rawHeaders = headerLines.map((line): [string, string] => {
      const colon = line.indexOf(':');
      return [line.slice(0, colon), line.slice(colon + 1).trim()];
    });
    const body = readBody(bytes.subarray(bodyStart), rawHeaders, status, ended, head);
    if (body === undefined) return undefined;
    return answer(status, rawHeaders, body);
  }
}

function readBody(
  rest: Buffer,
  rawHeaders: HeaderLines,
  status: number,
  ended: boolean,
  head: boolean,
): Buffer | undefined {
  if (head || status === 204 || status === 304) return Buffer.alloc(0);
  const value = (name: string): string | undefined =>
    rawHeaders.find(([n]) => n.toLowerCase() === name)?.[1];
  if (value('transfer-encoding')?.toLowerCase().includes('chunked')) return dechunk(rest);
  const length = value('content-length');
  if (length !== undefined) {
    const n = Number(length);
    return rest.length >= n ? rest.subarray(0, n) : undefined;
  }
  return ended ? rest : undefined;
}

function dechunk(rest: Buffer): Buffer | undefined {
  const parts: Buffer[] = [];
  let at = 0;
  for (;;) {
    const lineEnd = rest.indexOf('\r\n', at, 'latin1');
    if (lineEnd === -1) return undefined;
    const size = parseInt(rest.subarray(at, lineEnd).toString('latin1'), 16);
    if (Number.isNaN(size)) throw new Error('bad chunk size in the answer');
    if (size === 0)
      return rest.indexOf('\r\n\r\n', lineEnd, 'latin1') === -1 ? undefined : Buffer.concat(parts);
    if (rest.length < lineEnd + 2 + size + 2) return undefined;
    parts.push(rest.subarray(lineEnd + 2, lineEnd + 2 + size));
    at = lineEnd + 2 + size + 2;
  }
}

function answer(status: number, rawHeaders: HeaderLines, body: Buffer): RawResponse {
  const headers: Record<string, string | string[]> = {};
  for (const [name, value] of rawHeaders) {
    const key = name.toLowerCase();
    const prior = headers[key];
    if (key === 'set-cookie') headers[key] = [...((prior as string[] | undefined) ?? []), value];
    else headers[key] = prior === undefined ? value : `${prior as string}, ${value}`;
  }
  return {
    status,
    headers,
    rawHeaders,
    body,
    text: () => body.toString('utf8'),
    json: <T>() => JSON.parse(body.toString('utf8')) as T,
  };
}

export type HeaderLines = readonly (readonly [string, string])[];

/** A raw POST of a JSON body: Content-Type first, then `headers` as given. */
export function rawPostJson(
  port: number,
  target: string,
  headers: HeaderLines,
  body: string,
  options: Pick<RawRequest, 'host' | 'version'> = {},
): Promise<RawResponse> {
  return rawRequest(port, {
    ...options,
    target,
    headers: [['Content-Type', 'application/json'], ...headers],
    body,
  });
}

/** A raw GET of `target`, with `headers` as given. */
export function rawGet(
  port: number,
  target: string,
  headers: HeaderLines = [],
  options: Pick<RawRequest, 'host' | 'version'> = {},
): Promise<RawResponse> {
  return rawRequest(port, { ...options, method: 'GET', target, headers });
}
