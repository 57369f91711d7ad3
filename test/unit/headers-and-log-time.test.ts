// Hop-by-hop header sets (fast path and Connection-named extras), stored response headers, and the
// per-millisecond log time.
import fc from 'fast-check';
import { isoTimeCachedPerMillisecond, isoTimeField } from '../../src/observability/logger';
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

test('the log time is toISOString for any instant, whole seconds and each millisecond of one', () => {
  const at = (now: number): string => `,"time":"${new Date(now).toISOString()}"`;
  // Up to the year 9999: toISOString writes six-digit years after it.
  fc.assert(
    fc.property(fc.integer({ min: 0, max: 253_402_300_799_999 }), (now) => {
      expect(isoTimeField(now)).toBe(at(now));
    }),
    { numRuns: 2_000 },
  );
  // Every millisecond of one second, in order and then back across the second before it.
  const second = Date.UTC(2026, 11, 6, 20, 26, 1);
  for (let ms = 0; ms < 1000; ms++) expect(isoTimeField(second + ms)).toBe(at(second + ms));
  expect(isoTimeField(second - 1)).toBe(at(second - 1));
  expect(isoTimeField(second)).toBe(at(second));
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
