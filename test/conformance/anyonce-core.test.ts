// anyonce's core conformance vectors (what the IETF Idempotency-Key draft states) against the real
// proxy in front of the fixture upstream. Every one must pass.
import path from 'node:path';
import { barePassIds, type ConformanceTarget, startConformanceTarget } from './conformance-target';
import { loadVectors, runVector, type RunTarget } from './vector-runner';

const vectors = loadVectors(path.join(__dirname, 'anyonce', 'core'));

/** The proxy's `ttl: 2s` below, told to the runner: ≤ 2000 ms makes core/expiry-executes-again apply. */
const TTL_MS = 2_000;

/** Upstream's BARE_PASS_IDS: the core vectors a fixture with no idempotency layer passes. */
const BARE_PASS_IDS = [
  'core/expiry-executes-again',
  'core/get-ignored',
  'core/post-executes-once',
  'core/two-keys-execute-twice',
];

let conformance: ConformanceTarget;
let target: RunTarget;

beforeAll(async () => {
  // One protected route for the whole fixture: every POST needs a key, and GET /counter (a safe
  // method) passes through it untouched, key or not (docs/README.md#small-rules) — which
  // core/get-ignored checks.
  conformance = await startConformanceTarget('  ttl: 2s\n', TTL_MS);
  target = conformance.target;
});

afterAll(async () => {
  await conformance?.close();
});

test('loads all 11 core vectors', () => {
  expect(vectors).toHaveLength(11);
});

describe('the proxy against anyonce core vectors', () => {
  test.each(vectors.map((vector) => [vector.id, vector.title, vector] as const))(
    'passes %s (%s)',
    async (_id, _title, vector) => {
      // Compared whole, so a failing vector prints its failure sentences in the diff.
      expect(await runVector(vector, target)).toEqual({
        id: vector.id,
        status: 'pass',
        failures: [],
      });
    },
  );
});

// The same vectors through two instances on one table, each request to the next instance in turn:
// what one instance promises holds for a fleet (and on Citus, where CI also runs this file).
describe('two proxy instances behind a round-robin balancer against anyonce core vectors', () => {
  let fleet: ConformanceTarget;

  beforeAll(async () => {
    fleet = await startConformanceTarget('  ttl: 2s\n', TTL_MS, 2);
  });

  afterAll(async () => {
    await fleet?.close();
  });

  test.each(vectors.map((vector) => [vector.id, vector.title, vector] as const))(
    'passes %s (%s)',
    async (_id, _title, vector) => {
      expect(await runVector(vector, fleet.target)).toEqual({
        id: vector.id,
        status: 'pass',
        failures: [],
      });
    },
  );

  test('spread the requests over both instances', async () => {
    const served = await Promise.all(
      fleet.proxies.map(async (proxy) => {
        const text = await proxy.metrics.registry.metrics();
        return [...text.matchAll(/^idempotency_proxy_requests_total\{[^}]*\} (\d+)/gm)].reduce(
          (sum, match) => sum + Number(match[1]),
          0,
        );
      }),
    );
    expect(served.every((count) => count > 0)).toBe(true);
  });
});

describe('the vector runner', () => {
  test('fails every core vector but the bare-pass ones against the fixture with no proxy', async () => {
    expect(await barePassIds(vectors, conformance.fixture.url, TTL_MS)).toEqual(BARE_PASS_IDS);
  });

  test('reports a short-ttl vector as not applicable when the target TTL is longer than 2 s', async () => {
    const expiry = vectors.filter((vector) => vector.requires.includes('short-ttl'));
    expect(expiry.map((vector) => vector.id)).toEqual(['core/expiry-executes-again']);
    for (const vector of expiry) {
      expect(await runVector(vector, { ...target, ttlMs: 2_001 })).toEqual({
        id: vector.id,
        status: 'not-applicable',
        failures: [],
      });
    }
  });
});
