// Multi round-trip tool calls (protocol revision 2026-07-28, SEP-2322 "MRTR") through an MCP route
// (src/mcp/README.md): a tool that answers its first round with an `input_required` result (an
// embedded elicitation and a `requestState`) and acts only on the continuation, which carries the
// client's `inputResponses` and the echoed `requestState`. The first round is not final, so its
// claim is released; the continuation is the call that runs, once, and is what retries replay.
//
// The continuation's `inputResponses` are part of its key and fingerprint (never `requestState`,
// which a server may mint anew each round): round 1 is always released and keeps its own key, the
// same answers sent again replay, and a decline and a later acceptance are two calls.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { finalMessage, type RawMcpResponse, resultText } from '../support/mcp-client';
import { MODERN_REVISION } from '../support/mcp-modern-server';
import { orderId, startMcpProxy, toolLogLines } from '../support/mcp-proxy';
import {
  continuation,
  refundRound,
  type RoundsServer,
  startRoundsServer,
} from '../support/mcp-rounds-server';
import type { TestProxy } from '../support/proxy';

let upstream: RoundsServer;
let proxy: TestProxy;

beforeAll(async () => {
  upstream = await startRoundsServer();
  proxy = await startMcpProxy(upstream.origin);
});
afterAll(async () => {
  await proxy?.close();
  await upstream?.close();
});

/** One round of the refund through the proxy, as the v2 client sends it. */
function round(
  id: number,
  order: string,
  extra: Record<string, unknown> = {},
  headers: Record<string, string> = {},
): Promise<RawMcpResponse> {
  return refundRound(`${proxy.url}/mcp`, id, order, extra, headers);
}

function result(res: RawMcpResponse): Record<string, unknown> {
  expect(res.status).toBe(200);
  return finalMessage(res).result as Record<string, unknown>;
}

async function connectConfirmingClient(): Promise<{ client: Client; elicitations: () => number }> {
  let elicitations = 0;
  const client = new Client(
    { name: 'mcp-rounds-tests', version: '1.0.0' },
    {
      versionNegotiation: { mode: { pin: MODERN_REVISION } },
      capabilities: { elicitation: { form: {} } },
    },
  );
  client.setRequestHandler('elicitation/create', () => {
    elicitations += 1;
    return { action: 'accept', content: { confirm: true } };
  });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${proxy.url}/mcp`)));
  return { client, elicitations: () => elicitations };
}

test('the SDK v2 client confirms and refunds once; a second callTool is asked again and its confirmation replayed', async () => {
  const order = orderId('rounds-sdk');
  const { client, elicitations } = await connectConfirmingClient();
  try {
    const args = { order_id: order, amount: 7 };
    const first = await client.callTool({ name: 'refund', arguments: args });
    expect(JSON.parse(resultText(first))).toEqual({ refund_id: `re_${order}_1`, amount: 7 });
    expect(upstream.asked(order)).toBe(1);
    expect(upstream.refunds(order)).toBe(1);
    expect(elicitations()).toBe(1);

    // The agent repeats the whole call: round 1 has a key of its own (always released), so the
    // server asks again; the same answer is the same continuation, replayed without a refund.
    const again = await client.callTool({ name: 'refund', arguments: args });
    expect(resultText(again)).toBe(resultText(first));
    expect(upstream.asked(order)).toBe(2);
    expect(upstream.refunds(order)).toBe(1);
    expect(elicitations()).toBe(2);
  } finally {
    await client.close();
  }
  const calls = upstream.received.filter(
    (request) =>
      (request.json as { params?: { arguments?: { order_id?: string } } } | undefined)?.params
        ?.arguments?.order_id === order,
  );
  expect(calls).toHaveLength(3); // round 1, the continuation, round 1 again; never the continuation again
  expect((calls[1]!.json as { params: Record<string, unknown> }).params).toMatchObject(
    continuation(order),
  );
  const lines = (await toolLogLines(proxy, 4)).slice(-4);
  expect(lines.map((line) => line.outcome)).toEqual([
    'executed',
    'executed',
    'executed',
    'replayed',
  ]);
  expect(lines.map((line) => line.key)).toEqual([
    lines[0]!.key,
    lines[1]!.key,
    lines[0]!.key,
    lines[1]!.key,
  ]);
  expect(lines[0]!.key).not.toBe(lines[1]!.key);
  expect(lines[0]).toMatchObject({ tool: 'refund', keyDerived: true });
});

test('raw rounds: the first round is released and runs again; the continuation runs once and its retry replays', async () => {
  const order = orderId('rounds-raw');
  const first = await round(1, order);
  expect(result(first)).toMatchObject({
    resultType: 'input_required',
    requestState: `confirm:${order}`,
    inputRequests: { confirm: { method: 'elicitation/create' } },
  });
  expect(first.headers.get('idempotent-replayed')).toBeNull();

  // A raw retry of the first round is not a replay: the server asks again.
  const askedAgain = await round(2, order);
  expect(result(askedAgain)).toMatchObject({ resultType: 'input_required' });
  expect(askedAgain.headers.get('idempotent-replayed')).toBeNull();
  expect(upstream.asked(order)).toBe(2);
  expect(upstream.refunds(order)).toBe(0);

  const done = await round(3, order, continuation(order));
  expect(finalMessage(done).id).toBe(3);
  const refund = resultText(result(done));
  expect(JSON.parse(refund)).toEqual({ refund_id: `re_${order}_1`, amount: 7 });
  expect(done.headers.get('idempotent-replayed')).toBeNull();
  expect(upstream.refunds(order)).toBe(1);

  const retried = await round(4, order, continuation(order));
  expect(retried.headers.get('idempotent-replayed')).toBe('true');
  expect(finalMessage(retried).id).toBe(4);
  expect(resultText(result(retried))).toBe(refund);

  // A first round sent after the continuation was stored is a new question, not a replay: its
  // key has no answers in it. Nothing is refunded until the same answers come back.
  const lateFirst = await round(5, order);
  expect(lateFirst.headers.get('idempotent-replayed')).toBeNull();
  expect(result(lateFirst)).toMatchObject({ resultType: 'input_required' });
  expect(upstream.asked(order)).toBe(3);
  expect(upstream.refunds(order)).toBe(1);

  const lines = proxy.logs
    .filter((line) => line.msg === 'request' && line.tool === 'refund')
    .slice(-5)
    .map((line) => [line.key, line.outcome]);
  const [firstRound, continuationKey] = [lines[0]![0], lines[2]![0]];
  expect(firstRound).not.toBe(continuationKey);
  expect(lines).toEqual([
    [firstRound, 'executed'],
    [firstRound, 'executed'],
    [continuationKey, 'executed'],
    [continuationKey, 'replayed'],
    [firstRound, 'executed'],
  ]);
});

test('with an Idempotency-Key sent on every round: the same, under the client key', async () => {
  const order = orderId('rounds-key');
  const key = { 'idempotency-key': `rounds-${order}` };
  expect(result(await round(1, order, {}, key))).toMatchObject({ resultType: 'input_required' });
  expect(result(await round(2, order, {}, key))).toMatchObject({ resultType: 'input_required' });
  expect(upstream.asked(order)).toBe(2);
  const done = await round(3, order, continuation(order), key);
  const refund = resultText(result(done));
  const retried = await round(4, order, continuation(order), key);
  expect(retried.headers.get('idempotent-replayed')).toBe('true');
  expect(resultText(result(retried))).toBe(refund);
  // Another key is another refund (the server asks again first).
  const other = { 'idempotency-key': `rounds-${order}-2` };
  expect(result(await round(5, order, {}, other))).toMatchObject({ resultType: 'input_required' });
  expect(upstream.refunds(order)).toBe(1);
  expect(upstream.asked(order)).toBe(3);
});

test('after a declined continuation, the same refund confirmed later runs (derived key)', async () => {
  const order = orderId('rounds-decline');
  expect(result(await round(1, order))).toMatchObject({ resultType: 'input_required' });
  const declined = await round(2, order, continuation(order, 'decline'));
  expect(result(declined)).toMatchObject({ isError: true });
  expect(upstream.refunds(order)).toBe(0);

  // The user changes their mind: a new call, asked again, confirmed.
  const again = await round(3, order);
  expect(again.headers.get('idempotent-replayed')).toBeNull();
  expect(result(again)).toMatchObject({ resultType: 'input_required' });
  const done = await round(4, order, continuation(order));
  expect(done.headers.get('idempotent-replayed')).toBeNull();
  expect(upstream.refunds(order)).toBe(1);
  // The decline is still what its own retry gets.
  const declinedAgain = await round(5, order, continuation(order, 'decline'));
  expect(declinedAgain.headers.get('idempotent-replayed')).toBe('true');
  expect(result(declinedAgain)).toMatchObject({ isError: true });
  expect(upstream.refunds(order)).toBe(1);
});
