// A declined continuation is a tool result (isError: true) and is stored, but under its own key:
// the user's answers are part of a continuation's key (mcp/tool-call.ts), so a later confirmation
// of the same refund is a new call that runs, not a replay of the decline.
import { finalMessage, type RawMcpResponse } from '../support/mcp-client';
import { orderId, startMcpProxy } from '../support/mcp-proxy';
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

const result = (res: RawMcpResponse) => finalMessage(res).result as Record<string, unknown>;

test('after a declined continuation, the same refund confirmed later runs (derived key)', async () => {
  const url = `${proxy.url}/mcp`;
  const order = orderId('rounds-decline');
  expect(result(await refundRound(url, 1, order))).toMatchObject({ resultType: 'input_required' });
  const declined = await refundRound(url, 2, order, continuation(order, 'decline'));
  expect(result(declined)).toMatchObject({ isError: true });
  expect(upstream.refunds(order)).toBe(0);

  // The user changes their mind: a new call, asked again, confirmed.
  const again = await refundRound(url, 3, order);
  expect(again.headers.get('idempotent-replayed')).toBeNull();
  expect(result(again)).toMatchObject({ resultType: 'input_required' });
  const done = await refundRound(url, 4, order, continuation(order));
  expect(done.headers.get('idempotent-replayed')).toBeNull();
  expect(upstream.refunds(order)).toBe(1);
  // The decline is still what its own retry gets.
  const declinedAgain = await refundRound(url, 5, order, continuation(order, 'decline'));
  expect(declinedAgain.headers.get('idempotent-replayed')).toBe('true');
  expect(result(declinedAgain)).toMatchObject({ isError: true });
  expect(upstream.refunds(order)).toBe(1);
});
