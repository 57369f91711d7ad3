// A protected answer that breaks off after its head (the upstream stalls past its timeout, or its
// connection drops mid-stream) is an unknown outcome, as before; what the upstream had sent is kept
// with that record for the operator (admin API, `inspect`), byte for byte up to maxResponseBytes,
// and never replayed. Each upstream call is counted.
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { Pool } from 'pg';
import { runCli } from '../support/cli-process';
import { send } from '../support/http';
import { databaseUrl, startProxy, type TestProxy, uniqueTable } from '../support/proxy';
import {
  startStreamUpstream,
  type StreamScript,
  type StreamUpstream,
} from '../support/stream-upstream';

const TOKEN = 'partial-token-5e2a';
const SSE: StreamScript = {
  contentType: 'text/event-stream',
  pieces: Array.from({ length: 6 }, (_, i) => `id: ${i}\nevent: token\ndata: {"n":${i}}\n\n`),
  paceMs: 50,
};

let upstream: StreamUpstream;
let proxy: TestProxy;
let pool: Pool;
let configFile: string;
const table = uniqueTable('partial');
let keys = 0;

const yaml = (url: string): string => `
admin: { token: "${TOKEN}" }
store: { table: "\${TEST_TABLE}" }
upstreams: { api: { url: ${url}, timeout: 1s } }
routes:
  - { name: stream, match: { path: /stream }, upstream: api, idempotency: {} }
  - { name: small, match: { path: /small }, upstream: api, idempotency: { maxResponseBytes: 64b } }
  - { name: tools, match: { path: /mcp }, upstream: api, idempotency: { mcp: {} } }
  - name: retrying
    match: { path: /retrying }
    upstream: api
    idempotency: { unknownOutcome: retry, lockTimeout: 1s }
`;

beforeAll(async () => {
  upstream = await startStreamUpstream(SSE);
  proxy = await startProxy({ yaml: yaml(upstream.url), table });
  pool = new Pool({ connectionString: databaseUrl(), max: 1 });
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stream-partial-'));
  configFile = path.join(dir, 'proxy.yaml');
  fs.writeFileSync(configFile, yaml(upstream.url).replace('${TEST_TABLE}', table));
});

afterAll(async () => {
  await proxy?.close();
  await upstream?.close();
  await pool?.end();
});

beforeEach(() => {
  upstream.received.length = 0;
  upstream.script = SSE;
});

interface Answer {
  readonly status: number;
  readonly headers: http.IncomingHttpHeaders;
  readonly body: Buffer;
  /** True when the connection was cut before the answer's end. */
  readonly broken: boolean;
}

/** POSTs to the proxy and reads the answer to its end, or to where it was cut. */
function post(
  pathname: string,
  key: string,
  payload = '{"ask":"stream"}',
  headers: http.OutgoingHttpHeaders = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.request(`${proxy.url}${pathname}`, {
      method: 'POST',
      headers: {
        'idempotency-key': key,
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(payload),
        ...headers,
      },
    });
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      const done = (broken: boolean) => () =>
        resolve({
          status: res.statusCode!,
          headers: res.headers,
          body: Buffer.concat(chunks),
          broken,
        });
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', done(false));
      res.on('aborted', done(true));
      res.on('error', () => undefined);
    });
    req.on('error', reject);
    req.end(payload);
  });
}

interface PartialView {
  status: number;
  headers: [string, string][];
  bytes: number;
  storedBytes: number;
  cut: boolean;
  body?: { encoding: 'utf8' | 'base64'; data: string };
}

async function adminRecord(
  route: string,
  key: string,
  api = false,
): Promise<{ status: number; outcomeUnknown: boolean; partialUpstreamAnswer: PartialView | null }> {
  const where = api ? `/api/records/${route}/${key}` : `/keys/${route}/${key}`;
  const res = await send(`${proxy.adminUrl}${where}?body=1`, {
    method: 'GET',
    headers: { authorization: `Bearer ${TOKEN}` },
  });
  expect(res.status).toBe(200);
  return res.json();
}

const bytesOf = (body: PartialView['body']): Buffer =>
  Buffer.from(body!.data, body!.encoding === 'utf8' ? 'utf8' : 'base64');
const nextKey = (): string => `partial-${++keys}`;

test('a stream that stalls past the timeout: cut as before, its prefix kept for the operator only', async () => {
  upstream.script = { ...SSE, stallAfter: 2 };
  const key = nextKey();
  const first = await post('/stream', key);
  const sent = Buffer.from(SSE.pieces.slice(0, 3).join(''));
  expect(first.broken).toBe(true);
  expect(first.body.equals(sent)).toBe(true);
  // The retry is answered as before: the unknown outcome, nothing of the partial stream.
  const retry = await post('/stream', key);
  expect(retry.status).toBe(504);
  expect(retry.headers['idempotency-outcome']).toBe('unknown');
  expect(retry.headers['content-type']).toMatch(/problem\+json/);
  expect(retry.body.includes(sent)).toBe(false);
  expect(upstream.executions()).toHaveLength(1);

  const record = await adminRecord('stream', key);
  expect(record).toMatchObject({ status: 504, outcomeUnknown: true });
  const partial = record.partialUpstreamAnswer!;
  expect(partial).toMatchObject({ status: 200, bytes: sent.length, storedBytes: sent.length });
  expect(partial.cut).toBe(false);
  expect(partial.headers).toContainEqual(['content-type', 'text/event-stream']);
  expect(partial.body!.encoding).toBe('utf8');
  expect(bytesOf(partial.body).equals(sent)).toBe(true);
  // The console's API shows the same.
  expect((await adminRecord('stream', key, true)).partialUpstreamAnswer).toEqual(partial);

  // And `inspect` prints it, labelled.
  const inspect = await runCli(
    ['inspect', key, '--route', 'stream', '--body', '--config', configFile],
    { env: { DATABASE_URL: databaseUrl(), LOG_FORMAT: 'json' } },
  );
  expect(inspect.stderr).toBe('');
  expect(inspect.stdout).toContain(
    `partial upstream answer (broke off; never replayed): status 200, ${sent.length} body bytes sent\n`,
  );
  expect(inspect.stdout).toContain('    content-type: text/event-stream\n');
  expect(inspect.stdout).toContain(`partial body (utf8): ${SSE.pieces.slice(0, 3).join('')}`);
});

test('a connection dropped mid-stream: 502 unknown outcome to the retry, the prefix kept', async () => {
  upstream.script = { ...SSE, breakAfter: 1 };
  const key = nextKey();
  const first = await post('/stream', key);
  expect(first.broken).toBe(true);
  const retry = await post('/stream', key);
  expect(retry.status).toBe(502);
  expect(retry.headers['idempotency-outcome']).toBe('unknown');
  expect(upstream.executions()).toHaveLength(1);
  // The upstream destroys its socket right after writing piece 1, which may be lost with it; piece 0
  // went out well before. The record keeps what reached the proxy, the client got as much or less
  // (its own socket is cut as soon as the upstream's broke).
  const partial = (await adminRecord('stream', key)).partialUpstreamAnswer!;
  const kept = bytesOf(partial.body);
  expect(partial).toMatchObject({ status: 200, bytes: kept.length, cut: false });
  const written = SSE.pieces.slice(0, 2).join('');
  expect(kept.length).toBeGreaterThanOrEqual(Buffer.byteLength(SSE.pieces[0]!));
  expect(written.startsWith(kept.toString())).toBe(true);
  expect(kept.subarray(0, first.body.length).equals(first.body)).toBe(true);
});

test('a broken stream larger than maxResponseBytes keeps its first bytes, marked as cut', async () => {
  // 64 bytes end inside a two-byte character: the kept prefix is not UTF-8, so it comes as base64.
  const pieces = Array.from(
    { length: 6 },
    (_, i) => `event: token\ndata: ${i} ${'é'.repeat(24)}\n\n`,
  );
  upstream.script = { ...SSE, pieces, stallAfter: 3 };
  const key = nextKey();
  const first = await post('/small', key);
  const sent = Buffer.from(pieces.slice(0, 4).join(''));
  expect(first.broken).toBe(true);
  expect(first.body.equals(sent)).toBe(true);
  const retry = await post('/small', key);
  expect(retry.status).toBe(504);
  expect(retry.headers['idempotency-outcome']).toBe('unknown');
  expect(upstream.executions()).toHaveLength(1);
  const partial = (await adminRecord('small', key)).partialUpstreamAnswer!;
  expect(partial).toMatchObject({ status: 200, bytes: sent.length, storedBytes: 64, cut: true });
  expect(partial.body!.encoding).toBe('base64');
  expect(bytesOf(partial.body).equals(sent.subarray(0, 64))).toBe(true);
  const inspect = await runCli(
    ['inspect', key, '--route', 'small', '--body', '--config', configFile],
    { env: { DATABASE_URL: databaseUrl(), LOG_FORMAT: 'json' } },
  );
  expect(inspect.stdout).toContain(
    `status 200, ${sent.length} body bytes sent, only the first 64 kept\n`,
  );
  expect(inspect.stdout).toContain(
    `partial body (base64): ${sent.subarray(0, 64).toString('base64')}\n`,
  );
});

test('an answer kept whole that breaks off after its head: the retry and the record as for a stream', async () => {
  upstream.script = { ...SSE, contentType: 'application/json', breakAfter: 2 };
  const key = nextKey();
  // Not a stream: the client had no head yet, so it gets the unknown outcome itself.
  const first = await post('/stream', key);
  expect(first.status).toBe(502);
  expect(first.headers['idempotency-outcome']).toBe('unknown');
  expect(upstream.executions()).toHaveLength(1);
  const partial = (await adminRecord('stream', key)).partialUpstreamAnswer!;
  expect(partial.headers).toContainEqual(['content-type', 'application/json']);
  const kept = bytesOf(partial.body);
  expect(partial).toMatchObject({ status: 200, bytes: kept.length, cut: false });
  expect(kept.length).toBeGreaterThanOrEqual(Buffer.byteLength(SSE.pieces.slice(0, 2).join('')));
  expect(SSE.pieces.join('').startsWith(kept.toString())).toBe(true);
});

test('clearing the key removes the partial answer with the record; the next call runs afresh', async () => {
  upstream.script = { ...SSE, breakAfter: 0 };
  const key = nextKey();
  expect((await post('/stream', key)).broken).toBe(true);
  expect((await adminRecord('stream', key)).partialUpstreamAnswer).not.toBeNull();
  const cleared = await send(`${proxy.adminUrl}/keys/stream/${key}`, {
    method: 'DELETE',
    headers: { authorization: `Bearer ${TOKEN}` },
  });
  expect(cleared.status).toBe(200);
  const { rows } = await pool.query(`SELECT 1 FROM "${table}" WHERE key = $1::text`, [key]);
  expect(rows).toHaveLength(0);
  upstream.script = SSE;
  const again = await post('/stream', key);
  expect(again.broken).toBe(false);
  expect(again.body.toString()).toBe(SSE.pieces.join(''));
  const record = await adminRecord('stream', key);
  expect(record).toMatchObject({ status: 200, outcomeUnknown: false, partialUpstreamAnswer: null });
  expect(upstream.executions()).toHaveLength(2);
});

test('a record claimed afresh after it expired drops the partial answer of the one before', async () => {
  upstream.script = { ...SSE, stallAfter: 0 };
  const key = nextKey();
  expect((await post('/stream', key)).broken).toBe(true);
  expect((await adminRecord('stream', key)).partialUpstreamAnswer).not.toBeNull();
  await pool.query(
    `UPDATE "${table}" SET expires_at = now() - interval '1 second' WHERE key = $1::text`,
    [key],
  );
  upstream.script = SSE;
  expect((await post('/stream', key)).body.toString()).toBe(SSE.pieces.join(''));
  const record = await adminRecord('stream', key);
  expect(record).toMatchObject({ status: 200, outcomeUnknown: false, partialUpstreamAnswer: null });
  expect(upstream.executions()).toHaveLength(2);
});

test('a stream that ends whole keeps no partial answer', async () => {
  const key = nextKey();
  const answer = await post('/stream', key);
  expect(answer.broken).toBe(false);
  const { rows } = await pool.query<{ partial_answer: unknown; partial_body: unknown }>(
    `SELECT partial_answer, partial_body FROM "${table}" WHERE key = $1::text`,
    [key],
  );
  expect(rows).toEqual([{ partial_answer: null, partial_body: null }]);
});

test('under unknownOutcome: retry nothing is settled, so nothing is kept: the retry runs again', async () => {
  upstream.script = { ...SSE, breakAfter: 1 };
  const key = nextKey();
  expect((await post('/retrying', key)).broken).toBe(true);
  const { rows } = await pool.query<{ state: string; partial_answer: unknown }>(
    `SELECT state, partial_answer FROM "${table}" WHERE key = $1::text`,
    [key],
  );
  expect(rows).toEqual([{ state: 'in_progress', partial_answer: null }]);
});

test('an MCP tool call whose event stream stalls keeps its head and size: the proxy keeps no copy of the events', async () => {
  const call = (id: number): string =>
    JSON.stringify({
      jsonrpc: '2.0',
      id,
      method: 'tools/call',
      params: { name: 'refund', arguments: { order: 42 } },
    });
  const progress = (n: number): string =>
    `event: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p","progress":${n}}}\n\n`;
  upstream.script = { ...SSE, pieces: [progress(1), progress(2), progress(3)], stallAfter: 1 };
  const key = nextKey();
  const accept = { accept: 'application/json, text/event-stream' };
  const first = await post('/mcp', key, call(1), accept);
  const sent = progress(1) + progress(2);
  // As before: the events so far, then the error as the stream's last event.
  expect(first.body.toString().startsWith(sent)).toBe(true);
  expect(first.body.toString().slice(sent.length)).toMatch(/^event: message\ndata: .*"error"/);
  const retry = await post('/mcp', key, call(2), accept);
  expect(JSON.parse(retry.body.toString())).toMatchObject({ id: 2, error: {} });
  expect(upstream.executions()).toHaveLength(1);
  const record = await adminRecord('tools', key);
  expect(record.outcomeUnknown).toBe(true);
  expect(record.partialUpstreamAnswer).toEqual({
    status: 200,
    headers: expect.arrayContaining([['content-type', 'text/event-stream']]) as unknown,
    bytes: Buffer.byteLength(sent),
    storedBytes: 0,
    cut: true,
    body: { encoding: 'utf8', data: '' },
  });
});
