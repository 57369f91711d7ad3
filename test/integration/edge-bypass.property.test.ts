// Property (src/http/README.md): however the path of a protected route is spelled — extra slashes,
// dot segments, percent-encoded letters in either hex case, letter case, trailing slashes — one key
// runs the upstream's refund endpoint at most once, and a request the proxy logged as pass-through
// never runs it. Each run sends its generated targets on raw sockets under one fresh key, to an
// upstream that routes on the WHATWG pathname and to a real Express 5 app.
import fc from 'fast-check';
import { withLogLine } from '../support/edge-expect';
import { freshKey, postRefund, refundsProxyPer, UPSTREAM_KINDS } from '../support/edge-refunds';
import { REFUND_PATH } from '../support/edge-upstreams';

const hex = (char: string, upper: boolean): string => {
  const code = char.charCodeAt(0).toString(16);
  return `%${upper ? code.toUpperCase() : code}`;
};

/**
 * One letter of the path: mostly as is (so the upstream's own router still sees its endpoint), else
 * in the other case, or percent-encoded in either hex case.
 */
const letter = (char: string): fc.Arbitrary<string> =>
  fc.oneof(
    { weight: 12, arbitrary: fc.constant(char) },
    { weight: 1, arbitrary: fc.constant(char.toUpperCase()) },
    { weight: 1, arbitrary: fc.boolean().map((upper) => hex(char, upper)) },
    { weight: 1, arbitrary: fc.boolean().map((upper) => hex(char.toUpperCase(), upper)) },
  );

/** `.` or `..`, each dot literal or `%2e`/`%2E`. */
const dots = (count: 1 | 2): fc.Arbitrary<string> =>
  fc
    .array(fc.constantFrom('.', '%2e', '%2E'), { minLength: count, maxLength: count })
    .map((parts) => parts.join(''));

const slashes = fc.oneof(
  { weight: 3, arbitrary: fc.constant('/') },
  { weight: 1, arbitrary: fc.integer({ min: 2, max: 3 }).map((n) => '/'.repeat(n)) },
);

/** What may stand between two slashes of the path: nothing, `.`, or an extra segment then `..`. */
const detour: fc.Arbitrary<string> = fc.oneof(
  { weight: 3, arbitrary: fc.constant('') },
  { weight: 2, arbitrary: dots(1).map((dot) => `${dot}/`) },
  {
    weight: 2,
    arbitrary: fc
      .tuple(fc.constantFrom('x', 'refunds', 'a%2d', 'mail'), dots(2))
      .map(([segment, up]) => `${segment}/${up}/`),
  },
  { weight: 1, arbitrary: dots(2).map((up) => `${up}/`) },
);

/** What may follow the path: nothing, slashes, a dot segment, or a segment climbed back out of. */
const tail: fc.Arbitrary<string> = fc.oneof(
  { weight: 3, arbitrary: fc.constant('') },
  { weight: 2, arbitrary: slashes },
  { weight: 1, arbitrary: dots(1).map((dot) => `/${dot}`) },
  { weight: 1, arbitrary: dots(2).map((up) => `/${up}`) },
  { weight: 1, arbitrary: dots(2).map((up) => `/x/${up}`) },
);

const target: fc.Arbitrary<string> = fc
  .tuple(
    slashes,
    detour,
    fc.tuple(...[...REFUND_PATH.slice(1)].map(letter)).map((chars) => chars.join('')),
    tail,
  )
  .map(([lead, via, name, end]) => `${lead}${via}${name}${end}`);

const NUM_RUNS = 150;

describe.each(UPSTREAM_KINDS)('behind a %s upstream', (kind) => {
  const running = refundsProxyPer(kind);

  test('one key runs the refund at most once, and never for a request logged as pass-through', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(target, { minLength: 1, maxLength: 4 }), async (targets) => {
        const key = freshKey('prop');
        for (const spelled of targets) {
          const refundsBefore = running.upstream.refundsFor(key);
          const { line } = await withLogLine(running.proxy, () =>
            postRefund(running.proxy.port, spelled, key),
          );
          // Only a request the proxy executed may run the refund: a pass-through, a replay, a
          // mismatch or a refusal never does.
          const ran = running.upstream.refundsFor(key) - refundsBefore;
          if (line.outcome !== 'executed')
            expect({ spelled, outcome: line.outcome, path: line.path, ran }).toEqual({
              spelled,
              outcome: line.outcome,
              path: line.path,
              ran: 0,
            });
        }
        expect(running.upstream.refundsFor(key)).toBeLessThanOrEqual(1);
      }),
      { numRuns: NUM_RUNS },
    );
  }, 120_000);
});
