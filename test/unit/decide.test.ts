// decide.ts is pure: every claim state × the policies that change its meaning × how the request's
// waiting stands → one decision. What the pipeline then does with the store is pipeline.test.ts's;
// the same paths against PostgreSQL are the integration suite's.
import { LiveAnswer } from '../../src/store/live-answer';
import { parseConfigText } from '../../src/compiler/load';
import type { IdempotencyPolicy } from '../../src/config/types';
import {
  type Attempt,
  type ClaimDecision,
  decide,
  MAX_RACES,
  NOT_WAITED,
} from '../../src/protected/decide';
import type { ClaimResult, StoredResponse } from '../../src/store/record';

const STORED: StoredResponse = {
  status: 201,
  headers: [['content-type', 'text/plain']],
  body: Buffer.from('created'),
  bodyOmitted: false,
  outcomeUnknown: false,
};

/** The route's idempotency settings: lockTimeout 5s unless `settings` says. */
function policyWith(settings: string): IdempotencyPolicy {
  const block = settings.includes('lockTimeout') ? settings : `lockTimeout: 5s, ${settings}`;
  return parseConfigText(
    `upstreams:\n  app: { url: http://127.0.0.1:1 }\nroutes:\n  - name: orders\n    match: { path: /orders }\n    upstream: app\n    idempotency: { ${block} }\n`,
    'proxy.yaml',
    {},
  ).routes[0]!.idempotency!;
}

const CLAIMS: Record<string, ClaimResult> = {
  claimed: { kind: 'claimed', fence: 'mine', attempts: 1 },
  completed: { kind: 'completed', response: STORED, expiresInMs: 60_000, attempts: 2 },
  mismatch: { kind: 'mismatch', attempts: 2 },
  running: { kind: 'in-flight', fence: 'theirs', leaseRemainingMs: 2_500, attempts: 2 },
  'running, waiters full': {
    kind: 'in-flight',
    fence: '',
    leaseRemainingMs: 2_500,
    attempts: 0,
    full: true,
    from: 'leader',
  },
  'lease over': { kind: 'in-flight', fence: 'theirs', leaseRemainingMs: 0, attempts: 2 },
  'streaming here': { kind: 'attached', live: new LiveAnswer(), attempts: 0, from: 'leader' },
};

const WAITED_OUT: Attempt = { ...NOT_WAITED, waitOver: true, waitedMs: 1_000 };
const CLIENT_LEFT: Attempt = { ...NOT_WAITED, clientLeft: true };
const RACED_OUT: Attempt = { ...NOT_WAITED, races: MAX_RACES };

function summary(decision: ClaimDecision): string {
  switch (decision.kind) {
    case 'forward':
    case 'take-over':
    case 'settle-unknown':
      return `${decision.kind} ${decision.fence}`;
    case 'in-flight':
      return `in-flight ${decision.leaseRemainingMs}`;
    case 'shadow':
      return `shadow ${decision.verdict}`;
    case 'replay':
      return decision.response === STORED ? 'replay' : 'replay (another response)';
    default:
      return decision.kind;
  }
}

// claim × settings × attempt → decision.
const TABLE: [string, string, Attempt, string][] = [
  ['claimed', 'onConcurrent: reject', NOT_WAITED, 'forward mine'],
  ['claimed', 'enforce: false', NOT_WAITED, 'forward mine'],
  ['completed', 'onConcurrent: reject', NOT_WAITED, 'replay'],
  ['completed', 'onConcurrent: wait', WAITED_OUT, 'replay'],
  ['completed', 'enforce: false', NOT_WAITED, 'shadow would_replay'],
  ['mismatch', 'onConcurrent: reject', NOT_WAITED, 'mismatch'],
  ['mismatch', 'enforce: false', NOT_WAITED, 'shadow would_reject_mismatch'],
  ['running', 'onConcurrent: reject', NOT_WAITED, 'in-flight 2500'],
  ['running', 'onConcurrent: wait', NOT_WAITED, 'wait'],
  ['running', 'onConcurrent: attach', NOT_WAITED, 'wait'],
  ['running', 'onConcurrent: attach', WAITED_OUT, 'in-flight 1500'],
  ['streaming here', 'onConcurrent: attach', NOT_WAITED, 'attach'],
  ['running', 'enforce: false, onConcurrent: attach', NOT_WAITED, 'shadow would_wait'],
  // The wait ran out: the lease it answers with is what is left of it after the wait.
  ['running', 'onConcurrent: wait', WAITED_OUT, 'in-flight 1500'],
  ['running, waiters full', 'onConcurrent: wait', NOT_WAITED, 'in-flight 2500'],
  ['running', 'onConcurrent: wait', CLIENT_LEFT, 'client-gone'],
  ['running', 'enforce: false, onConcurrent: reject', NOT_WAITED, 'shadow would_reject_in_flight'],
  ['running', 'enforce: false, onConcurrent: wait', NOT_WAITED, 'shadow would_wait'],
  ['lease over', 'unknownOutcome: fail', NOT_WAITED, 'settle-unknown theirs'],
  ['lease over', 'unknownOutcome: retry', NOT_WAITED, 'take-over theirs'],
  ['lease over', 'onConcurrent: wait, unknownOutcome: retry', NOT_WAITED, 'take-over theirs'],
  ['lease over', 'enforce: false, unknownOutcome: fail', NOT_WAITED, 'shadow would_replay'],
  ['lease over', 'enforce: false, unknownOutcome: retry', NOT_WAITED, 'take-over theirs'],
  // Three races lost to other instances: give up with a 409 rather than loop.
  ['lease over', 'unknownOutcome: retry', RACED_OUT, 'in-flight 1000'],
  ['claimed', 'onConcurrent: reject', RACED_OUT, 'in-flight 1000'],
  [
    'lease over',
    'enforce: false, unknownOutcome: retry',
    RACED_OUT,
    'shadow would_reject_in_flight',
  ],
];

describe.each(TABLE)('a claim %s, with { %s }', (claim, settings, attempt, expected) => {
  const how = attempt === NOT_WAITED ? '' : ` (${JSON.stringify(attempt)})`;
  it(`decides ${expected}${how}`, () => {
    expect(summary(decide(CLAIMS[claim]!, policyWith(settings), attempt))).toBe(expected);
  });
});

test('a lease that has nearly run out is still at least 1 ms, so Retry-After is never 0', () => {
  const nearlyOver: ClaimResult = { ...CLAIMS.running!, leaseRemainingMs: 200 } as ClaimResult;
  expect(summary(decide(nearlyOver, policyWith('onConcurrent: wait'), WAITED_OUT))).toBe(
    'in-flight 1',
  );
});

test('decide is pure: the same inputs give the same decision, and nothing it is given changes', () => {
  for (const [claim, settings, attempt] of TABLE) {
    const input = CLAIMS[claim]!;
    const frozen = JSON.stringify(input);
    const policy = policyWith(settings);
    expect(decide(input, policy, attempt)).toEqual(decide(input, policy, attempt));
    expect(JSON.stringify(input)).toBe(frozen);
  }
});
