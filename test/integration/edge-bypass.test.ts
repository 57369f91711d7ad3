// Security regression (src/http/README.md): no spelling of a protected route's path reaches the
// upstream's refund endpoint unprotected. Every variant goes out on a raw socket, so nothing
// normalises it on the way, to two upstreams that decide for themselves what the refund endpoint
// is: one routing on the WHATWG URL parser's pathname, one a real Express 5 app (case-insensitive,
// non-strict). The invariant is counted on the upstream side: one key, at most one refund.
import { expectProblem, withLogLine } from '../support/edge-expect';
import { type HeaderLines, rawGet, type RawResponse } from '../support/edge-raw';
import { freshKey, postRefund, refundsProxyPer, UPSTREAM_KINDS } from '../support/edge-refunds';

/** The canonical path is `/refunds` itself: a repeat of `/refunds` under the same key replays. */
const sameAsRefunds: readonly string[] = [
  '/refunds',
  '//refunds',
  '/./refunds',
  '/x/../refunds',
  '/%2e%2e/refunds',
  '/.%2e/refunds',
  '/%2E./refunds',
  '/../refunds',
  '/%72efunds',
  '/%72%65%66%75%6E%64%73',
  '/a/b/../../refunds',
  '/a/./b/%2e%2E/../refunds',
  '/mail/../refunds',
  '/mail/%2e%2e/refunds',
];

/**
 * Canonical paths that a protected route matches leniently (trailing slash, letter case) and that
 * are forwarded as such: a repeat under the key of `/refunds` replays or is a 422, never a second
 * run.
 */
const lenient: readonly (readonly [target: string, forwarded: string])[] = [
  ['/refunds/', '/refunds/'],
  ['/REFUNDS', '/REFUNDS'],
  ['/Refunds/', '/Refunds/'],
  ['/./refunds/.', '/refunds/'],
  ['///refunds///', '/refunds/'],
  ['/refunds/x/..', '/refunds/'],
  ['/%52efunds', '/Refunds'],
  ['/MAIL/../REFUNDS/', '/REFUNDS/'],
];

/** Targets the proxy refuses with 400 REQUEST_TARGET_INVALID (or Node's parser does, first). */
const refused: readonly (readonly [target: string, parserMayReject: boolean])[] = [
  ['/refunds%2F', false],
  ['/refunds%2f', false],
  ['/refunds%5C', false],
  ['/refunds%5c', false],
  ['/%2Frefunds', false],
  ['/x%2F..%2Frefunds', false],
  ['/x/..%5Crefunds', false],
  ['/refunds\\', false],
  ['/\\refunds', false],
  ['/refunds#x', false],
  ['/refunds#', false],
  ['/re%zzfunds', false],
  ['/refunds%4', false],
  ['/refunds%', false],
  ['/refunds%00', false],
  ['/refunds\x00', true],
];

describe.each(UPSTREAM_KINDS)('behind a %s upstream', (kind) => {
  const running = refundsProxyPer(kind);

  const receivedWith = (key: string) =>
    running.upstream.received.filter((req) => req.headers['idempotency-key'] === key);

  function expectExecuted(res: RawResponse): void {
    expect({ status: res.status, replayed: res.headers['idempotent-replayed'] }).toEqual({
      status: expect.any(Number),
      replayed: undefined,
    });
    expect([200, 201]).toContain(res.status);
  }

  function expectReplayOf(res: RawResponse, first: RawResponse): void {
    expect({ status: res.status, replayed: res.headers['idempotent-replayed'] }).toEqual({
      status: first.status,
      replayed: 'true',
    });
    expect(res.text()).toBe(first.text());
  }

  /** A replay, or a 422 for a key reused on another canonical path: never a second execution. */
  function expectReplayOrReused(res: RawResponse, first: RawResponse): void {
    if (res.status === 422) expectProblem(res, 422, 'IDEMPOTENCY_KEY_REUSED');
    else expectReplayOf(res, first);
  }

  describe.each(sameAsRefunds)('%s', (target) => {
    test('after /refunds with the same key, replays it: one refund', async () => {
      const key = freshKey('same-after');
      const first = await postRefund(running.proxy.port, '/refunds', key);
      expect(first.status).toBe(201);
      expectReplayOf(await postRefund(running.proxy.port, target, key), first);
      expect(running.upstream.refundsFor(key)).toBe(1);
    });

    test('is protected and forwarded as /refunds; /refunds after it replays', async () => {
      const key = freshKey('same-first');
      const { res, line } = await withLogLine(running.proxy, () =>
        postRefund(running.proxy.port, target, key),
      );
      expect(res.status).toBe(201);
      expect(line).toMatchObject({ route: 'refunds', path: '/refunds', outcome: 'executed' });
      expect(receivedWith(key).map((req) => req.url)).toEqual(['/refunds']);
      expectReplayOf(await postRefund(running.proxy.port, '/refunds', key), res);
      expect(running.upstream.refundsFor(key)).toBe(1);
    });
  });

  describe.each(lenient)('%s', (target, forwarded) => {
    test('after /refunds with the same key, replays or is refused as reused: one refund', async () => {
      const key = freshKey('lenient-after');
      const first = await postRefund(running.proxy.port, '/refunds', key);
      expect(first.status).toBe(201);
      expectReplayOrReused(await postRefund(running.proxy.port, target, key), first);
      expect(running.upstream.refundsFor(key)).toBe(1);
      expect(receivedWith(key)).toHaveLength(1);
    });

    test(`is protected and forwarded as ${forwarded}; /refunds after it never runs again`, async () => {
      const key = freshKey('lenient-first');
      const { res, line } = await withLogLine(running.proxy, () =>
        postRefund(running.proxy.port, target, key),
      );
      expectExecuted(res);
      expect(line).toMatchObject({ route: 'refunds', path: forwarded, outcome: 'executed' });
      expect(receivedWith(key).map((req) => req.url)).toEqual([forwarded]);
      expectReplayOrReused(await postRefund(running.proxy.port, '/refunds', key), res);
      expect(running.upstream.refundsFor(key)).toBeLessThanOrEqual(1);
      expect(receivedWith(key)).toHaveLength(1);
    });
  });

  describe.each(refused)('%j', (target, parserMayReject) => {
    test('is a 400 problem, forwards nothing and claims nothing', async () => {
      const key = freshKey('refused');
      const res = await postRefund(running.proxy.port, target, key);
      expectProblem(res, 400, 'REQUEST_TARGET_INVALID', { parserMayReject });
      expect(receivedWith(key)).toHaveLength(0);
      const then = await postRefund(running.proxy.port, '/refunds', key);
      expectExecuted(then);
      expect(running.upstream.refundsFor(key)).toBe(1);
    });

    test('after /refunds with the same key, is a 400 problem: one refund', async () => {
      const key = freshKey('refused-after');
      expect((await postRefund(running.proxy.port, '/refunds', key)).status).toBe(201);
      expectProblem(
        await postRefund(running.proxy.port, target, key),
        400,
        'REQUEST_TARGET_INVALID',
        {
          parserMayReject,
        },
      );
      expect(running.upstream.refundsFor(key)).toBe(1);
    });
  });

  test.each([
    ['/orders/7/refund', 'replays'],
    ['//orders//7/refund', 'replays'],
    ['/orders/7/./refund', 'replays'],
    ['/orders/x/../7/refund', 'replays'],
    ['/orders/7/%72efund', 'replays'],
    ['/orders/7/refund/', 'replays or is reused'],
    ['/ORDERS/7/Refund', 'replays or is reused'],
    ['/Orders/7/REFUND/.', 'replays or is reused'],
    ['/orders/7/refund%2F', 'is refused'],
    ['/orders/7%2F..%2F7/refund', 'is refused'],
    ['/orders/7/refund\\', 'is refused'],
  ])(
    '%s after /orders/7/refund with the same key %s: one refund (a route with a parameter)',
    async (target, expected) => {
      const key = freshKey('order');
      const first = await postRefund(running.proxy.port, '/orders/7/refund', key);
      expect(first.status).toBe(201);
      const res = await postRefund(running.proxy.port, target, key);
      if (expected === 'is refused') expectProblem(res, 400, 'REQUEST_TARGET_INVALID');
      else if (expected === 'replays') expectReplayOf(res, first);
      else expectReplayOrReused(res, first);
      expect(running.upstream.refundsFor(key)).toBe(1);
      expect(receivedWith(key)).toHaveLength(1);
    },
  );

  // Node hands a request with Upgrade to the proxy's upgrade handler, whatever its method: the same
  // routing must hold there.
  test.each(['/refunds', '//refunds', '/x/../refunds', '/REFUNDS/', '/%72efunds'])(
    'a POST with Upgrade to %s is never passed through to the refund endpoint',
    async (target) => {
      const key = freshKey('upgrade');
      const upgrade: HeaderLines = [
        ['Connection', 'Upgrade'],
        ['Upgrade', 'websocket'],
      ];
      const res = await postRefund(running.proxy.port, target, key, upgrade);
      expect(res.status).toBeGreaterThanOrEqual(400);
      expect(running.upstream.refundsFor(key)).toBe(0);
      expect(receivedWith(key)).toHaveLength(0);
    },
  );

  test('an upgrade to a refused target is a 400 problem', async () => {
    const res = await rawGet(running.proxy.port, '/%2e%2e/x%2F', [
      ['Connection', 'Upgrade'],
      ['Upgrade', 'websocket'],
    ]);
    expectProblem(res, 400, 'REQUEST_TARGET_INVALID');
  });

  test('one key sent with every variant in turn runs the refund once', async () => {
    const key = freshKey('all-variants');
    const targets = [...sameAsRefunds, ...lenient.map(([target]) => target)];
    for (const target of [...targets, ...refused.map(([target]) => target), ...targets])
      await postRefund(running.proxy.port, target, key);
    expect(running.upstream.refundsFor(key)).toBe(1);
  });

  test('an encoded slash in the query is fine and is forwarded unchanged', async () => {
    const key = freshKey('query');
    const res = await postRefund(running.proxy.port, '/refunds?next=%2Fhome&back=..%2F..%5Cx', key);
    expect(res.status).toBe(201);
    expect(receivedWith(key).map((req) => req.url)).toEqual([
      '/refunds?next=%2Fhome&back=..%2F..%5Cx',
    ]);
    const passed = await rawGet(running.proxy.port, '/files/a?next=%2Fhome%2f');
    expect(passed.status).toBe(200);
    expect(passed.json()).toMatchObject({ url: '/files/a?next=%2Fhome%2f' });
  });

  test.each([
    ['/files/%c3%a9t%c3%a9', '/files/%C3%A9t%C3%A9'],
    ['/files/%7Euser/%41%2d%5f%2E', '/files/~user/A-_.'],
    ['/files/a|b{c}', '/files/a%7Cb%7Bc%7D'],
    ['/files/"q"^`', '/files/%22q%22%5E%60'],
    ['/files//a/./b/../c', '/files/a/c'],
  ])('a pass-through request to %s is forwarded, and logged, as %s', async (target, canonical) => {
    const { res, line } = await withLogLine(running.proxy, () =>
      rawGet(running.proxy.port, target),
    );
    expect(res.status).toBe(200);
    expect(res.json()).toMatchObject({ url: canonical });
    expect(line).toMatchObject({
      route: 'everything-else',
      path: canonical,
      outcome: 'passthrough',
    });
  });

  test.each([
    ['/status', 'status'],
    ['/STATUS', 'everything-else'],
    ['/status/', 'everything-else'],
    ['/./status', 'status'],
    ['/%73tatus', 'status'],
  ])('a pass-through route matches exactly: %s goes to %s', async (target, route) => {
    const { res, line } = await withLogLine(running.proxy, () =>
      rawGet(running.proxy.port, target),
    );
    expect(res.status).toBe(200);
    expect(line).toMatchObject({ route, outcome: 'passthrough' });
  });

  test.each([
    ['/strict/refunds', 'strict-refunds', 'executed'],
    ['//strict/./refunds', 'strict-refunds', 'executed'],
    ['/strict/refunds/', 'everything-else', 'passthrough'],
    ['/STRICT/refunds', 'everything-else', 'passthrough'],
  ])('a route with match.strict matches exactly: %s goes to %s', async (target, route, outcome) => {
    const key = freshKey('strict');
    const { line } = await withLogLine(running.proxy, () =>
      postRefund(running.proxy.port, target, key),
    );
    expect(line).toMatchObject({ route, outcome });
  });

  test.each([
    ['/mail/emails', '/api/emails'],
    ['/MAIL/Emails/', '/api/Emails/'],
    ['/Mail//emails', '/api/emails'],
  ])(
    'a leniently matched protected route strips its prefix in any case: %s is forwarded as %s',
    async (target, forwarded) => {
      const key = freshKey('emails');
      const { res, line } = await withLogLine(running.proxy, () =>
        postRefund(running.proxy.port, target, key),
      );
      expectExecuted(res);
      expect(line).toMatchObject({ route: 'emails', outcome: 'executed' });
      expect(receivedWith(key).map((req) => req.url)).toEqual([forwarded]);
    },
  );

  test.each([
    ['/mail/%2e%2e/x', '/x'],
    ['/mail/inbox/../../x', '/x'],
    ['/mail/.%2E', '/'],
    ['/mail/inbox/%2e%2e/%2e%2e/%2e%2e/x', '/x'],
  ])(
    'the stripPrefix route cannot be used to escape its base path: %s reaches %s via the pass-through',
    async (target, forwarded) => {
      const { res, line } = await withLogLine(running.proxy, () =>
        rawGet(running.proxy.port, target),
      );
      expect(res.status).toBe(200);
      expect(line).toMatchObject({ route: 'everything-else', path: forwarded });
      expect(res.json()).toMatchObject({ url: forwarded });
    },
  );

  test('whatever reaches the upstream through the stripPrefix route stays under /api', async () => {
    const before = running.upstream.received.length;
    for (const target of [
      '/mail/inbox',
      '/mail/inbox/..',
      '/mail/./%2e%2e/mail/x',
      '/mail/a/../b',
    ]) {
      const { res, line } = await withLogLine(running.proxy, () =>
        rawGet(running.proxy.port, target),
      );
      expect(res.status).toBe(200);
      if (line.route !== 'mail') continue;
      const { url } = res.json<{ url: string }>();
      expect(new URL(url, 'http://x').pathname).toMatch(/^\/api(?:\/|$)/);
    }
    expect(running.upstream.received.length).toBeGreaterThan(before);
  });
});
