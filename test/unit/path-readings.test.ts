// pathReadings: the other ways upstreams read a canonical path — servlet containers drop ";…"
// parameters, some handlers trim whitespace from segments or decode the path once more — each
// itself canonical, so the router can match them like the path as sent.
import fc from 'fast-check';
import { canonicalPath, pathReadings } from '../../src/http/canonical-target';

/** The readings of a raw path, after canonicalising it as the edge does. */
function readingsOf(raw: string): { path: string; servlet?: string; suspect?: string[] } {
  const path = canonicalPath(raw);
  if (typeof path !== 'string') throw new Error(`${raw} is refused`);
  const readings = pathReadings(path);
  return {
    path,
    ...(readings?.servlet === undefined ? {} : { servlet: readings.servlet }),
    ...(readings === undefined || readings.suspect.length === 0
      ? {}
      : { suspect: [...readings.suspect].sort() }),
  };
}

describe('path readings', () => {
  test.each([
    ['/refunds', { path: '/refunds' }],
    ['/refunds%3Bx', { path: '/refunds%3Bx' }],
    ['/refunds;jsessionid=1', { path: '/refunds;jsessionid=1', servlet: '/refunds' }],
    ['/orders;a/1/refund', { path: '/orders;a/1/refund', servlet: '/orders/1/refund' }],
    ['/refunds;a=1;b=2/', { path: '/refunds;a=1;b=2/', servlet: '/refunds/' }],
    ['/a;x/..;/b', { path: '/b' }],
    ['/x/..;/refunds', { path: '/refunds' }],
    ['/a/b;/../c', { path: '/a/c' }],
    ['/refunds%20', { path: '/refunds%20', suspect: ['/refunds'] }],
    ['/%09refunds%0A', { path: '/%09refunds%0A', suspect: ['/refunds'] }],
    ['/refunds%20/x', { path: '/refunds%20/x', suspect: ['/refunds/x'] }],
    ['/ref%20unds', { path: '/ref%20unds' }],
    ['/%2572efunds', { path: '/%2572efunds', suspect: ['/refunds'] }],
    ['/a%252Fb', { path: '/a%252Fb', suspect: ['/a/b'] }],
    ['/a%25%32%46b', { path: '/a%252Fb', suspect: ['/a/b'] }],
    ['/a%2500b', { path: '/a%2500b' }],
    [
      '/or%2564ers/7/refund%20',
      {
        path: '/or%2564ers/7/refund%20',
        suspect: ['/or%2564ers/7/refund', '/orders/7/refund', '/orders/7/refund%20'],
      },
    ],
    ['/refunds;v=%20', { path: '/refunds;v=%20', servlet: '/refunds', suspect: ['/refunds;v='] }],
    [
      '/r%2565funds;x%20',
      {
        path: '/r%2565funds;x%20',
        servlet: '/r%2565funds',
        suspect: ['/r%2565funds;x', '/refunds', '/refunds;x', '/refunds;x%20'],
      },
    ],
  ])('%s', (raw, expected) => {
    expect(readingsOf(raw)).toEqual(expected);
  });

  const pathChars = fc.constantFrom('a', 'r', ';', '=', '/', '.', '%20', '%2572', '%2525', '%09');
  const path = fc
    .array(pathChars, { maxLength: 12 })
    .map((parts) => canonicalPath(`/${parts.join('')}`))
    .filter((p): p is string => typeof p === 'string');

  test('every reading is canonical, differs from the path and from the others', () => {
    fc.assert(
      fc.property(path, (p) => {
        const readings = pathReadings(p);
        if (readings === undefined) return;
        const all = [
          p,
          ...(readings.servlet === undefined ? [] : [readings.servlet]),
          ...readings.suspect,
        ];
        expect(new Set(all).size).toBe(all.length);
        for (const reading of all.slice(1)) expect(canonicalPath(reading)).toBe(reading);
      }),
      { numRuns: 500 },
    );
  });

  test('a path without ";" or "%" has no other reading', () => {
    fc.assert(
      fc.property(fc.stringMatching(/^(\/[a-z.]{1,5}){1,4}$/), (raw) => {
        const p = canonicalPath(raw);
        if (typeof p === 'string') expect(pathReadings(p)).toBeUndefined();
      }),
    );
  });
});
