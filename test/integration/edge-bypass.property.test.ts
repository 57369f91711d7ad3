// Property: however the path of a protected route is spelled — extra slashes, dot segments,
// percent-encoded letters in either hex case, letter case, trailing slashes — one key runs the
// upstream's refund endpoint at most once, and a request the proxy logged as pass-through never runs
// it. Each run sends its generated targets on raw sockets under one fresh key, to an upstream that
// routes on the WHATWG pathname and to a real Express 5 app. The second property adds what servlet
// containers, Rails and Laravel read differently — `;` parameters, `..;`, format suffixes, a `_method`
// in the query or the body, double encoding, trailing whitespace escapes — against an upstream that
// reads requests all those ways.
import fc from 'fast-check';
import { withLogLine } from '../support/edge-expect';
import { rawRequest } from '../support/edge-raw';
import { freshKey, postRefund, refundsProxyPer, UPSTREAM_KINDS } from '../support/edge-refunds';
import { REFUND_PATH } from '../support/edge-upstreams';
import { proxyInFrontOf } from '../support/proxy';
import {
  multipart,
  MULTIPART,
  readingsYaml,
  startReadingUpstream,
} from '../support/readings-upstream';

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

/** A letter as `letter` spells it, or percent-encoded twice (`%2572` for `r`). */
const readingLetter = (char: string): fc.Arbitrary<string> =>
  fc.oneof(
    { weight: 10, arbitrary: letter(char) },
    { weight: 1, arbitrary: fc.constant(`%25${char.charCodeAt(0).toString(16)}`) },
  );

/** What may follow a segment: nothing, `;` parameters, an escaped whitespace or control byte. */
const segmentEnd = fc.tuple(
  fc.oneof(
    { weight: 6, arbitrary: fc.constant('') },
    {
      weight: 2,
      arbitrary: fc.constantFrom(';jsessionid=s3cr3t', ';a=1;b=2', ';', ';v=%20', ';x/..;'),
    },
  ),
  fc.oneof(
    { weight: 8, arbitrary: fc.constant('') },
    { weight: 1, arbitrary: fc.constantFrom('%20', '%09', '%0A', '%0d', '%0c', '%20%20') },
  ),
);

const readingSegment = (name: string): fc.Arbitrary<string> =>
  fc
    .tuple(fc.tuple(...[...name].map(readingLetter)), segmentEnd)
    .map(([chars, [parameters, space]]) => `${chars.join('')}${parameters}${space}`);

/** The endpoints of the reading upstream, by the segments of their path; each is a protected route. */
const ENDPOINT_PATHS: readonly (readonly string[])[] = [
  ['refunds'],
  ['orders', '7', 'refund'],
  ['payments', '7'],
  ['accounts', '7'],
];

const lead = fc.oneof(
  { weight: 4, arbitrary: fc.constant('/') },
  { weight: 1, arbitrary: fc.constantFrom('/x/..;/', '/..;/', '/x;y/../', '//', '/x/.;/../') },
);

const formatSuffix = fc.oneof(
  { weight: 4, arbitrary: fc.constant('') },
  { weight: 1, arbitrary: fc.constantFrom('.json', '/.json', '.xml', '.JSON', '.json/') },
);

const query = fc.oneof(
  { weight: 4, arbitrary: fc.constant('') },
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      '?x=1',
      '?_method=DELETE',
      '?_method=delete&x=1',
      '?%5Fmethod=DELETE',
      '?.method=DELETE',
      '?+_method=DELETE',
      '?_method=POST',
    ),
  },
);

interface Body {
  readonly type: string;
  readonly body: string | Buffer;
}

const body: fc.Arbitrary<Body> = fc.constantFrom<Body>(
  { type: 'application/json', body: '{"amount":1000}' },
  { type: 'application/json', body: '{"amount":1000,"_method":"DELETE"}' },
  { type: 'application/x-www-form-urlencoded', body: 'amount=1000' },
  { type: 'application/x-www-form-urlencoded', body: 'amount=1000&_method=DELETE' },
  { type: 'application/x-www-form-urlencoded', body: 'amount=1000&%5Fmethod=delete' },
  { type: MULTIPART, body: multipart([['amount', '1000']]) },
  {
    type: MULTIPART,
    body: multipart([
      ['amount', '1000'],
      ['_method', 'DELETE'],
    ]),
  },
);

const readingTarget: fc.Arbitrary<string> = fc
  .tuple(
    lead,
    fc
      .constantFrom(...ENDPOINT_PATHS)
      .chain((segments) => fc.tuple(...segments.map(readingSegment))),
    formatSuffix,
    query,
  )
  .map(([start, segments, suffix, search]) => `${start}${segments.join('/')}${suffix}${search}`);

const ENDPOINTS = ['refund', 'order-refund', 'delete-payment', 'delete-account'];

describe('behind an upstream that reads paths and methods as Tomcat, Rails and Laravel do', () => {
  const running = proxyInFrontOf(startReadingUpstream, readingsYaml);

  test('without a key no protected action runs; one key runs each at most once', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.boolean(),
        fc.array(fc.tuple(readingTarget, body), { minLength: 1, maxLength: 4 }),
        async (keyed, requests) => {
          const { upstream, proxy } = running;
          const key = keyed ? freshKey('readings') : '';
          for (const [spelled, { type, body: payload }] of requests) {
            const before = upstream.ranFor(key);
            const headers: [string, string][] = [
              ['Content-Type', type],
              ['Authorization', 'Bearer readings-tenant'],
            ];
            if (keyed) headers.push(['Idempotency-Key', key]);
            const { line } = await withLogLine(proxy, () =>
              rawRequest(proxy.port, { target: spelled, headers, body: payload }),
            );
            const ran = upstream.ranFor(key) - before;
            if (!keyed || line.outcome !== 'executed')
              expect({ spelled, outcome: line.outcome, ran }).toEqual({
                spelled,
                outcome: line.outcome,
                ran: 0,
              });
          }
          const twice = ENDPOINTS.filter((endpoint) => upstream.ran(endpoint, key) > 1);
          if (keyed) expect({ requests, twice }).toEqual({ requests, twice: [] });
        },
      ),
      { numRuns: NUM_RUNS },
    );
  }, 120_000);
});
