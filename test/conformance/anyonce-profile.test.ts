// anyonce's profile conformance vectors (anyonce's own choices where the IETF draft is silent)
// against the real proxy, configured with anyonce's choices wherever our SPEC lets a config select
// them. A vector passes, or fails with exactly the differences our SPEC documents (the table
// below): any other failure in those vectors is a regression.
import path from 'node:path';
import { barePassIds, type ConformanceTarget, startConformanceTarget } from './conformance-target';
import { loadVectors, runVector, type RunTarget } from './vector-runner';

const vectors = loadVectors(path.join(__dirname, 'anyonce', 'profile'));

/**
 * Vector id → the exact failure sentences the runner reports for it, where our contract differs
 * from anyonce's profile on purpose and no config option selects anyonce's choice.
 */
const KNOWN_DIFFERENCES: Readonly<Record<string, readonly string[]>> = {
  // Our problem `code`s are the proxy's stable error codes in upper snake case
  // (README.md#what-a-client-sees-on-a-protected-route, the README's error table; the same codes
  // name log outcomes and metrics); anyonce's profile (D7, D10, D11) spells them in kebab case.
  // Status, media type and the other members agree.
  'profile/empty-key-rejected': [
    'step "empty": bodyJson member "code" expected "invalid-key", got "IDEMPOTENCY_KEY_INVALID"',
  ],
  'profile/key-too-long': [
    'step "too-long": bodyJson member "code" expected "invalid-key", got "IDEMPOTENCY_KEY_INVALID"',
  ],
  'profile/problem-code-member': [
    'step "missing": bodyJson member "code" expected "missing-key", got "IDEMPOTENCY_KEY_MISSING"',
    'step "changed": bodyJson member "code" expected "fingerprint-mismatch", got "IDEMPOTENCY_KEY_REUSED"',
  ],
  // A replay whose body was too large to store is marked `Idempotent-Body-Omitted: true`
  // (README.md#what-a-client-sees-on-a-protected-route, last row; not configurable), where anyonce
  // (D12) sends `Idempotency-Replay: omitted`. The status, the empty body and the (configured)
  // Idempotency-Replayed: true marker agree.
  'profile/omitted-body-replay': [
    'step "retry": header Idempotency-Replay expected "omitted", got absent',
  ],
};

/** Upstream's BARE_PASS_IDS: the profile vectors a fixture with no idempotency layer passes. */
const BARE_PASS_IDS = ['profile/5xx-not-stored'];

/** The proxy's `ttl: 10m` below: longer than any profile vector runs. */
const TTL_MS = 10 * 60 * 1000;

let conformance: ConformanceTarget;
let target: RunTarget;

beforeAll(async () => {
  // anyonce's choices, where config/README.md makes them options: its replay marker, never storing
  // a 5xx (so a retry executes again), and a 1 MiB cap on stored bodies (sizes are binary,
  // docs/README.md#small-rules).
  conformance = await startConformanceTarget(
    [
      '  replayedHeader: Idempotency-Replayed',
      '  store: ["2xx", "3xx", "4xx"]',
      '  maxResponseBytes: 1mb',
      '  ttl: 10m',
      '',
    ].join('\n'),
    TTL_MS,
  );
  target = conformance.target;
});

afterAll(async () => {
  await conformance?.close();
});

test('loads all 9 profile vectors, and every known difference names one of them', () => {
  expect(vectors).toHaveLength(9);
  const ids = vectors.map((vector) => vector.id);
  for (const id of Object.keys(KNOWN_DIFFERENCES)) expect(ids).toContain(id);
});

const passing = vectors.filter((vector) => KNOWN_DIFFERENCES[vector.id] === undefined);
const differing = vectors.filter((vector) => KNOWN_DIFFERENCES[vector.id] !== undefined);

describe('the proxy against anyonce profile vectors', () => {
  test.each(passing.map((vector) => [vector.id, vector.title, vector] as const))(
    'passes %s (%s)',
    async (_id, _title, vector) => {
      expect(await runVector(vector, target)).toEqual({
        id: vector.id,
        status: 'pass',
        failures: [],
      });
    },
  );

  test.each(differing.map((vector) => [vector.id, vector] as const))(
    'fails %s with exactly the differences our SPEC documents',
    async (_id, vector) => {
      expect(await runVector(vector, target)).toEqual({
        id: vector.id,
        status: 'fail',
        failures: KNOWN_DIFFERENCES[vector.id],
      });
    },
  );
});

describe('the vector runner', () => {
  test('fails every profile vector but the bare-pass one against the fixture with no proxy', async () => {
    expect(await barePassIds(vectors, conformance.fixture.url)).toEqual(BARE_PASS_IDS);
  });
});
