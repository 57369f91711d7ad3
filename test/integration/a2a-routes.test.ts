// A2A routes (src/a2a/README.md) with the official SDK (@a2a-js/sdk) on both sides: an SDK client
// whose agent card points at the proxy, an SDK agent behind it whose executor counts executions per
// messageId. Every "runs once" is checked against that count.
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { type Message, type StreamResponse, type Task } from '@a2a-js/sdk';
import { type Client, ClientFactory } from '@a2a-js/sdk/client';
import { type A2aAgent, agentCard, startA2aAgent, userMessage } from '../support/a2a-agent';
import { until } from '../support/eventually';
import { startProxy, type TestProxy } from '../support/proxy';

let agent: A2aAgent;
let proxy: TestProxy;
/** An agent whose event stream breaks off after its first event: the proxy cannot know the end. */
let breaking: http.Server;
let breakingSends = 0;

beforeAll(async () => {
  agent = await startA2aAgent();
  breaking = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      breakingSends += 1;
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: {"jsonrpc":"2.0","id":1,"result":{"task":{"id":"t","contextId":"c"}}}\n\n');
      setTimeout(() => res.socket?.destroy(), 50);
    });
  });
  await new Promise<void>((resolve) => breaking.listen(0, '127.0.0.1', resolve));
  const breakingPort = (breaking.address() as AddressInfo).port;
  proxy = await startProxy({
    yaml: `
store: { table: "\${TEST_TABLE}" }
upstreams:
  agent: { url: ${agent.origin}, timeout: 5s }
  breaking: { url: http://127.0.0.1:${breakingPort}, timeout: 5s }
routes:
  - name: breaking
    match: { path: /breaking }
    upstream: breaking
    idempotency: { a2a: {} }
  - name: tenants
    match: { path: /tenants/** }
    stripPrefix: /tenants
    upstream: agent
    idempotency:
      tenant: [header:authorization]
      a2a: {}
  - name: agent
    match: { path: /** }
    upstream: agent
    idempotency:
      lockTimeout: 10s
      a2a: {}
`,
  });
});
afterAll(async () => {
  await proxy?.close();
  await agent?.close();
  breaking?.closeAllConnections();
  await new Promise((resolve) => breaking?.close(resolve));
});

function client(binding: 'JSONRPC' | 'HTTP+JSON'): Promise<Client> {
  return new ClientFactory().createFromAgentCard(agentCard(proxy.url, [binding]));
}

function send(message: Message) {
  return { tenant: '', message, configuration: undefined, metadata: {} };
}

async function collect(stream: AsyncGenerator<StreamResponse>): Promise<StreamResponse[]> {
  const events: StreamResponse[] = [];
  for await (const event of stream) events.push(event);
  return events;
}

interface RpcAnswer {
  readonly id: unknown;
  readonly result?: unknown;
  readonly error: { readonly code: number; readonly message: string };
}

/** A raw JSON-RPC POST to the proxy: its HTTP status, headers and parsed body. */
async function rpc(body: unknown, headers: Record<string, string> = {}, path = '/rpc') {
  const res = await fetch(`${proxy.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'a2a-version': '1.0', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return {
    status: res.status,
    headers: res.headers,
    json: (await res.json()) as RpcAnswer,
  };
}

function sendMessageRpc(
  id: number | string,
  messageId: string,
  text: string,
  method = 'SendMessage',
) {
  return {
    jsonrpc: '2.0',
    id,
    method,
    params: { message: { messageId, role: 'ROLE_USER', parts: [{ text }] } },
  };
}

describe.each(['JSONRPC', 'HTTP+JSON'] as const)('A2A route, SDK client over %s', (binding) => {
  test('a retried send executes once; the retry gets the same Task', async () => {
    const a2a = await client(binding);
    const message = userMessage(randomUUID(), 'order-1');
    const first = (await a2a.sendMessage(send(message))) as Task;
    const second = await a2a.sendMessage(send(message));
    expect(second).toEqual(first);
    expect(first.artifacts?.[0]?.parts[0]?.content).toMatchObject({ $case: 'text' });
    expect(agent.executions(message.messageId)).toBe(1);
  });

  test('a retried send answered with a Message gets the same Message', async () => {
    const a2a = await client(binding);
    const message = userMessage(randomUUID(), 'reply please');
    const first = await a2a.sendMessage(send(message));
    const second = await a2a.sendMessage(send(message));
    expect((first as Message).role).toBeDefined();
    expect(second).toEqual(first);
    expect(agent.executions(message.messageId)).toBe(1);
  });

  test('a retried streaming send executes once; the replay gives the same events', async () => {
    const a2a = await client(binding);
    const message = userMessage(randomUUID(), 'order-stream');
    const first = await collect(a2a.sendMessageStream(send(message)));
    const again = await collect((await client(binding)).sendMessageStream(send(message)));
    expect(first.length).toBeGreaterThanOrEqual(3);
    expect(again).toEqual(first);
    expect(agent.executions(message.messageId)).toBe(1);
  });

  test('the messageId reused with another message is refused, and nothing runs', async () => {
    const a2a = await client(binding);
    const messageId = randomUUID();
    await a2a.sendMessage(send(userMessage(messageId, 'order-a')));
    const refused = a2a.sendMessage(send(userMessage(messageId, 'order-b')));
    await expect(refused).rejects.toMatchObject({
      message: expect.stringContaining('This messageId was already sent with another message'),
    });
    const error = (await refused.catch((e: unknown) => e)) as Record<string, unknown>;
    if (binding === 'JSONRPC') expect(error.envelopeCode).toBe(-32602);
    else expect(error.statusCode).toBe(422);
    expect(agent.executions(messageId)).toBe(1);
  });

  test('concurrent duplicates execute once; the others are told it is in flight', async () => {
    const message = userMessage(randomUUID(), 'order-concurrent');
    const release = agent.hold(message.messageId);
    let settled = 0;
    const attempts = await Promise.all([1, 2, 3, 4].map(() => client(binding)));
    const sends = attempts.map((a2a) =>
      a2a.sendMessage(send(message)).finally(() => (settled += 1)),
    );
    await until(() => settled === 3, 'three duplicates answered', { timeoutMs: 10_000 });
    release();
    const results = await Promise.allSettled(sends);
    const refused = results.filter((r) => r.status === 'rejected');
    expect(refused).toHaveLength(3);
    for (const r of refused) {
      const reason = (r as PromiseRejectedResult).reason as Record<string, unknown>;
      if (binding === 'JSONRPC') expect(reason.envelopeCode).toBe(409);
      else expect(reason.statusCode).toBe(409);
    }
    expect(agent.executions(message.messageId)).toBe(1);
  });

  test('getTask passes through, unstored', async () => {
    const a2a = await client(binding);
    const task = (await a2a.sendMessage(send(userMessage(randomUUID(), 'order-get')))) as Task;
    const before = agent.received.length;
    const got = await a2a.getTask({ tenant: '', id: task.id, historyLength: undefined });
    const again = await a2a.getTask({ tenant: '', id: task.id, historyLength: undefined });
    expect(got.id).toBe(task.id);
    expect(again.id).toBe(task.id);
    expect(agent.received.length - before).toBe(2);
  });
});

describe('A2A route, JSON-RPC on the wire', () => {
  test('a retry gets the stored answer under its own id, marked replayed', async () => {
    const messageId = randomUUID();
    const first = await rpc(sendMessageRpc(1, messageId, 'wire'));
    const second = await rpc(sendMessageRpc('retry-7', messageId, 'wire'));
    expect(first.json.id).toBe(1);
    expect(second.json.id).toBe('retry-7');
    expect(second.json.result).toEqual(first.json.result);
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    expect(agent.executions(messageId)).toBe(1);
  });

  test('A2A 0.3 message/send is protected the same way', async () => {
    const messageId = randomUUID();
    const legacy = (id: number) => ({
      jsonrpc: '2.0',
      id,
      method: 'message/send',
      params: {
        message: {
          kind: 'message',
          messageId,
          role: 'user',
          parts: [{ kind: 'text', text: 'v03' }],
        },
      },
    });
    const headers = { 'a2a-version': '0.3' };
    const first = await rpc(legacy(1), headers);
    const second = await rpc(legacy(2), headers);
    expect(first.json.result).toBeDefined();
    expect(second.json).toEqual({ ...first.json, id: 2 });
    expect(agent.executions(messageId)).toBe(1);
  });

  test('the conflict error: -32602, the ErrorInfo, the request id', async () => {
    const messageId = randomUUID();
    await rpc(sendMessageRpc(1, messageId, 'one'));
    const other = await rpc(sendMessageRpc(2, messageId, 'two'));
    expect(other.status).toBe(200);
    expect(other.json).toMatchObject({
      jsonrpc: '2.0',
      id: 2,
      error: {
        code: -32602,
        data: [
          {
            '@type': 'type.googleapis.com/google.rpc.ErrorInfo',
            reason: 'IDEMPOTENCY_KEY_CONFLICT',
            domain: 'idempotency-proxy',
            metadata: { code: 'IDEMPOTENCY_KEY_REUSED' },
          },
        ],
      },
    });
    expect(agent.executions(messageId)).toBe(1);
  });

  test('a send without messageId is refused with -32602, never forwarded', async () => {
    const before = agent.received.length;
    const res = await rpc({
      jsonrpc: '2.0',
      id: 5,
      method: 'SendMessage',
      params: { message: { role: 'ROLE_USER', parts: [{ text: 'no id' }] } },
    });
    expect(res.json).toMatchObject({ id: 5, error: { code: -32602 } });
    expect(res.json.error.message).toContain('params.message.messageId is required');
    expect(agent.received.length).toBe(before);
  });

  test.each([
    ['not JSON', '{"jsonrpc":"2.0",', 400, -32700, 'JSON_INVALID'],
    [
      'a duplicate key',
      '{"jsonrpc":"2.0","id":1,"id":2,"method":"SendMessage"}',
      400,
      -32600,
      'JSON_DUPLICATE_KEY',
    ],
  ])(
    'a body the proxy cannot read (%s) gets a JSON-RPC error, nothing forwarded',
    async (_what, body, status, code, reason) => {
      const before = agent.received.length;
      const res = await rpc(body);
      expect(res.status).toBe(status);
      expect(res.json).toMatchObject({
        jsonrpc: '2.0',
        id: null,
        error: { code, data: [{ reason }] },
      });
      expect(agent.received.length).toBe(before);
    },
  );

  test('a batch holding a send is refused, never forwarded', async () => {
    const before = agent.received.length;
    const res = await rpc([sendMessageRpc(1, randomUUID(), 'batched')]);
    expect(res.json).toMatchObject({ id: null, error: { code: -32600 } });
    expect(agent.received.length).toBe(before);
  });

  test('the Idempotency-Key header, when sent, is the key instead of messageId', async () => {
    const key = `k-${randomUUID()}`;
    const a = randomUUID();
    const first = await rpc(sendMessageRpc(1, a, 'keyed'), { 'idempotency-key': key });
    // Another messageId under the same key is another message: refused.
    const other = await rpc(sendMessageRpc(2, randomUUID(), 'keyed'), { 'idempotency-key': key });
    expect(first.json.result).toBeDefined();
    expect(other.json.error.code).toBe(-32602);
    expect(agent.executions(a)).toBe(1);
  });
});

describe('A2A route, HTTP+JSON on the wire', () => {
  test('POST /rest/message:send replays the stored body, marked replayed', async () => {
    const messageId = randomUUID();
    const post = () =>
      fetch(`${proxy.url}/rest/message:send`, {
        method: 'POST',
        headers: { 'content-type': 'application/a2a+json', 'a2a-version': '1.0' },
        body: JSON.stringify({
          message: { messageId, role: 'ROLE_USER', parts: [{ text: 'rest' }] },
        }),
      });
    const first = await post();
    const second = await post();
    expect(first.status).toBe(200);
    expect(await second.json()).toEqual(await first.json());
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(agent.executions(messageId)).toBe(1);
  });

  test('an unreadable body on message:send gets the HTTP+JSON error shape', async () => {
    const before = agent.received.length;
    const res = await fetch(`${proxy.url}/rest/message:send`, {
      method: 'POST',
      headers: { 'content-type': 'application/a2a+json' },
      body: 'nope',
    });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({
      error: { code: 400, status: 'INVALID_ARGUMENT', details: [{ reason: 'JSON_INVALID' }] },
    });
    expect(agent.received.length).toBe(before);
  });
});

describe('A2A route, what is stored and for whom', () => {
  test('a messageId is scoped by tenant: each caller’s send runs, each one’s retry replays', async () => {
    const messageId = randomUUID();
    const as = (who: string, id: number) =>
      rpc(
        sendMessageRpc(id, messageId, 'tenant'),
        { authorization: `Bearer ${who}` },
        '/tenants/rpc',
      );
    const alice = await as('alice', 1);
    const bob = await as('bob', 2);
    const aliceAgain = await as('alice', 3);
    expect(bob.json.result).not.toEqual(alice.json.result);
    expect(aliceAgain.json).toEqual({ ...alice.json, id: 3 });
    expect(agent.executions(messageId)).toBe(2);
  });

  test('a JSON-RPC error from the agent is released: the retry runs', async () => {
    const messageId = randomUUID();
    // The agent's SDK logs the refusal it answers; it is the point of this test, not noise.
    jest.spyOn(console, 'error').mockImplementationOnce(() => undefined);
    const refused = await rpc(sendMessageRpc(1, messageId, 'версия'), { 'a2a-version': '9.0' });
    expect(refused.json.error.code).toBe(-32009); // VersionNotSupportedError, from the agent
    expect(agent.executions(messageId)).toBe(0);
    const accepted = await rpc(sendMessageRpc(2, messageId, 'версия'));
    expect(accepted.json.result).toBeDefined();
    expect(agent.executions(messageId)).toBe(1);
  });

  test('a stream that breaks off is an unknown outcome: the retry gets the error, nothing runs again', async () => {
    const messageId = randomUUID();
    const body = sendMessageRpc(1, messageId, 'break', 'SendStreamingMessage');
    const first = await fetch(`${proxy.url}/breaking`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    const text = await first.text();
    expect(text).toContain('"result":{"task"');
    expect(text).toMatch(/event: error\ndata: .*"IDEMPOTENCY_OUTCOME_UNKNOWN"/);
    const retry = await rpc({ ...body, id: 2 }, {}, '/breaking');
    expect(retry.headers.get('idempotency-outcome')).toBe('unknown');
    expect(retry.json).toMatchObject({ id: 2, error: { code: 502 } });
    expect(breakingSends).toBe(1);
  });
});
