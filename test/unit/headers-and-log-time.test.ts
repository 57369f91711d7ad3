// Hop-by-hop header sets (fast path and Connection-named extras), stored response headers, and the
// per-millisecond log time.
import { isoTimeCachedPerMillisecond } from '../../src/observability/logger';
import { HOP_BY_HOP, hopByHopNames } from '../../src/http/headers';
import { responseHeaderPairs } from '../../src/http/response';
import { loggedPath } from '../../src/http/request-log';

test.each([undefined, 'keep-alive', 'close'])(
  'Connection: %s adds nothing to the fixed hop-by-hop set',
  (connection) => {
    expect(hopByHopNames(connection === undefined ? {} : { connection })).toBe(HOP_BY_HOP);
  },
);

test('names listed in Connection become hop-by-hop for that message only', () => {
  const names = hopByHopNames({ connection: 'Keep-Alive, X-Private ,close, ,upgrade' });
  expect(names.has('x-private')).toBe(true);
  expect(names.has('keep-alive')).toBe(true);
  expect(names.has('close')).toBe(false);
  expect(HOP_BY_HOP.has('x-private')).toBe(false);
});

test('the log time is pino-shaped ISO text for the current millisecond', () => {
  const before = Date.now();
  const fragment = isoTimeCachedPerMillisecond();
  const after = Date.now();
  const match = /^,"time":"(.+)"$/.exec(fragment);
  expect(match).not.toBeNull();
  const at = Date.parse(match![1]!);
  expect(new Date(at).toISOString()).toBe(match![1]);
  expect(at).toBeGreaterThanOrEqual(before);
  expect(at).toBeLessThanOrEqual(after);
});

test('the log time moves on with the clock', async () => {
  const first = isoTimeCachedPerMillisecond();
  await new Promise((resolve) => setTimeout(resolve, 5));
  expect(isoTimeCachedPerMillisecond()).not.toBe(first);
});

test('stored response headers leave out hop-by-hop, Connection-named and framing headers', () => {
  const upstream = {
    connection: ['keep-alive', 'X-Private'], // repeated Connection lines, as undici reports them
    'x-private': 'secret',
    'keep-alive': 'timeout=5',
    'transfer-encoding': 'chunked',
    'content-length': '12',
    'content-type': 'application/json',
    'set-cookie': ['a=1', 'b=2'],
  };
  expect(responseHeaderPairs(upstream, { keepSetCookie: true })).toEqual([
    ['content-type', 'application/json'],
    ['set-cookie', 'a=1'],
    ['set-cookie', 'b=2'],
  ]);
  expect(
    responseHeaderPairs({ ...upstream, connection: 'close' }, { keepSetCookie: false }),
  ).toEqual([
    ['x-private', 'secret'],
    ['content-type', 'application/json'],
  ]);
});

describe('the path the request log shows', () => {
  test.each([
    ['/refunds', '/refunds'],
    ['/refunds?api_token=SECRET', '/refunds'],
    ['/refunds;jsessionid=SECRET', '/refunds;jsessionid=*'],
    ['/orders;jsessionid=SECRET/1/refund', '/orders;jsessionid=*/1/refund'],
    ['/refunds;a=1;b=2', '/refunds;a=*;b=*'],
    ['/refunds;SECRET', '/refunds;*'],
    ['/refunds;', '/refunds;'],
    ['/refunds;=SECRET', '/refunds;=*'],
    ['/x/..;/refunds;jsessionid=SECRET?q=SECRET', '/x/..;/refunds;jsessionid=*'],
  ])('%s → %s', (path, logged) => {
    expect(loggedPath(path)).toBe(logged);
  });
});
