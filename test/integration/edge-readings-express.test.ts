// The spellings of edge-readings.test.ts in front of a real Express 5 app, which reads none of them
// the servlet or Rails way: it does not drop ";…" (`/refunds;jsessionid=1` reaches no route) and has
// no `(.:format)` (`/refunds.json` is not `/refunds`). The proxy's answers must not depend on that —
// it cannot know how its upstream reads — and Express's own count must still be at most one per key.
import { freshKey, postRefund } from '../support/edge-refunds';
import { rawPostJson } from '../support/edge-raw';
import { startExpressUpstream } from '../support/edge-upstreams';
import { proxyInFrontOf } from '../support/proxy';
import { readingsYaml } from '../support/readings-upstream';

// The config of edge-readings.test.ts: only the upstream differs.
const running = proxyInFrontOf(startExpressUpstream, readingsYaml);

// Express runs the refund only where the forwarded path is its route: `/x/..;/refunds` is forwarded
// as `/refunds` (a dot segment); the others are forwarded as sent and reach no Express route.
test.each([
  ['/refunds;jsessionid=1', 0],
  ['/x/..;/refunds', 1],
  ['/refunds.json', 0],
  ['/refunds/.xml', 0],
  ['/orders;a/1/refund', 0],
  ['/orders/1/refund;v=1', 0],
  ['/orders/1/refund.json', 0],
])(
  '%s: 400 without a key; with one key Express runs it %i time(s), then replayed',
  async (target, runs) => {
    const before = running.upstream.refunds.length;
    const refused = await rawPostJson(running.proxy.port, target, [], '{"amount":1}');
    expect(refused.status).toBe(400);
    expect(running.upstream.refunds.length).toBe(before);
    const key = freshKey('express');
    await postRefund(running.proxy.port, target, key);
    const again = await postRefund(running.proxy.port, target, key);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(running.upstream.refundsFor(key)).toBe(runs);
  },
);

test.each(['/refunds%20', '/%2572efunds'])(
  '%s: 400 REQUEST_TARGET_INVALID whatever the upstream, nothing forwarded',
  async (target) => {
    const received = running.upstream.received.length;
    const res = await postRefund(running.proxy.port, target, freshKey('express-bad'));
    expect(res.status).toBe(400);
    expect(res.json<{ code: string }>().code).toBe('REQUEST_TARGET_INVALID');
    expect(running.upstream.received.length).toBe(received);
  },
);
