// decide.ts over every claim state × policy, against an in-memory KeyStore: what it decides, and
// what it leaves in the store. The integration suite runs the same paths against PostgreSQL.
import { EventEmitter } from 'node:events';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { parseConfigText } from '../../src/config/load';
import type { IdempotencyPolicy, RouteConfig } from '../../src/config/types';
import { newLogEntry } from '../../src/http/request-log';
import type { RecordId, StoredResponse } from '../../src/store/record';
import type { ProtectedDeps, ProtectedRequest } from '../../src/protected/context';
import { type Call, decide, type Decision } from '../../src/protected/decide';
import { StoreUnavailable } from '../../src/protected/store-call';
import { MemoryKeyStore } from '../support/memory-key-store';
import { CachingKeyStore } from '../../src/store/caching-key-store';

const FINGERPRINT = Buffer.from('fingerprint');
const OTHER = Buffer.from('another request');
const ID: RecordId = { scope: 'orders', tenant: '', key: 'k1' };
const STORED: StoredResponse = {
  status: 201,
  headers: [['content-type', 'text/plain']],
  body: Buffer.from('created'),
  bodyOmitted: false,
  outcomeUnknown: false,
};

/** The route's idempotency settings: lockTimeout 5s and waitTimeout 200ms unless `settings` says. */
function routeWith(settings: string): RouteConfig {
  const defaults = ['lockTimeout: 5s', 'waitTimeout: 200ms'].filter(
    (setting) => !settings.includes(setting.split(':')[0]!),
  );
  const block = [...defaults, settings].join(', ');
  return parseConfigText(
    `upstreams:\n  app: { url: http://127.0.0.1:1 }\nroutes:\n  - name: orders\n    match: { path: /orders }\n    upstream: app\n    idempotency: { ${block} }\n`,
    'proxy.yaml',
    {},
  ).routes[0]!;
}

function requestFor(route: RouteConfig): ProtectedRequest {
  const res = Object.assign(new EventEmitter(), { destroyed: false });
  return {
    req: { headers: {} } as IncomingMessage,
    res: res as unknown as ServerResponse,
    route,
    policy: route.idempotency as IdempotencyPolicy,
    target: {} as ProtectedRequest['target'],
    log: newLogEntry('POST', '/orders'),
  };
}

function depsFor(store: MemoryKeyStore): ProtectedDeps {
  return {
    store: new CachingKeyStore(store, undefined),
    upstreams: undefined as unknown as ProtectedDeps['upstreams'],
    passThrough: undefined as unknown as ProtectedDeps['passThrough'],
    onStoreError: () => undefined,
  };
}

const call: Call = { id: ID, fingerprint: FINGERPRINT, body: Buffer.from('{}') };

type Seed = 'absent' | 'completed' | 'mismatch' | 'running' | 'lease-over';
/** The fence of a seeded record's holder: another instance's claim. */
const SEEDED_FENCE = '00000000-0000-4000-8000-000000000001';

function seeded(seed: Seed): MemoryKeyStore {
  const store = new MemoryKeyStore();
  const now = store.now();
  if (seed === 'completed')
    store.seed(ID, {
      fingerprint: FINGERPRINT,
      state: 'completed',
      response: STORED,
      token: SEEDED_FENCE,
    });
  if (seed === 'mismatch')
    store.seed(ID, {
      fingerprint: OTHER,
      state: 'completed',
      response: STORED,
      token: SEEDED_FENCE,
    });
  if (seed === 'running')
    store.seed(ID, {
      fingerprint: FINGERPRINT,
      state: 'in_progress',
      leaseEndsAt: now + 3_000,
      token: SEEDED_FENCE,
    });
  if (seed === 'lease-over')
    store.seed(ID, {
      fingerprint: FINGERPRINT,
      state: 'in_progress',
      leaseEndsAt: now - 1,
      token: SEEDED_FENCE,
    });
  return store;
}

/** What a decision amounts to, in one word (and the problem code for refusals). */
function summary(decision: Decision): string {
  switch (decision.kind) {
    case 'problem':
      return `problem ${decision.error.code}`;
    case 'replay':
      return decision.stored.outcomeUnknown ? 'replay unknown' : 'replay';
    case 'forward':
      return decision.fence === SEEDED_FENCE
        ? 'forward under the seeded fence'
        : 'forward under a new fence';
    case 'shadow':
      return `shadow ${decision.verdict}`;
    default:
      return decision.kind;
  }
}

// seed × settings → decision. Every claim state under each policy that changes what happens.
const MATRIX: [Seed, string, string][] = [
  ['absent', 'onConcurrent: reject', 'forward under a new fence'],
  ['absent', 'enforce: false', 'forward under a new fence'],
  ['completed', 'onConcurrent: reject', 'replay'],
  ['completed', 'enforce: false', 'shadow would_replay'],
  ['mismatch', 'onConcurrent: reject', 'problem IDEMPOTENCY_KEY_REUSED'],
  ['mismatch', 'enforce: false', 'shadow would_reject_mismatch'],
  ['running', 'onConcurrent: reject', 'problem IDEMPOTENCY_KEY_IN_FLIGHT'],
  ['running', 'onConcurrent: wait', 'problem IDEMPOTENCY_KEY_IN_FLIGHT'], // after waitTimeout
  ['running', 'enforce: false, onConcurrent: reject', 'shadow would_reject_in_flight'],
  ['running', 'enforce: false, onConcurrent: wait', 'shadow would_wait'],
  ['lease-over', 'unknownOutcome: fail', 'replay unknown'],
  ['lease-over', 'unknownOutcome: retry', 'forward under a new fence'],
  ['lease-over', 'enforce: false, unknownOutcome: fail', 'shadow would_replay'],
  ['lease-over', 'enforce: false, unknownOutcome: retry', 'forward under a new fence'],
];

describe.each(MATRIX)('a record %s, with { %s }', (seed, settings, expected) => {
  it(`decides: ${expected}`, async () => {
    const store = seeded(seed);
    const request = requestFor(routeWith(settings));
    const decision = await decide(depsFor(store), request, call, undefined);
    expect(summary(decision)).toBe(expected);
    if (expected === 'problem IDEMPOTENCY_KEY_IN_FLIGHT')
      expect(decision.kind === 'problem' && decision.error.retryAfterSeconds).toBe(3);
  });
});

describe('what decide leaves in the store', () => {
  it('claims an absent key for this request, with the lease', async () => {
    const store = seeded('absent');
    await decide(depsFor(store), requestFor(routeWith('lockTimeout: 5s')), call, undefined);
    expect(store.row(ID)).toMatchObject({ state: 'in_progress' });
    expect(store.row(ID)!.leaseEndsAt - store.now()).toBeGreaterThan(4_000);
  });

  it('settles a lease that ended as the unknown outcome under fail, and counts the attempt', async () => {
    const store = seeded('lease-over');
    const request = requestFor(routeWith('unknownOutcome: fail'));
    const decision = await decide(depsFor(store), request, call, undefined);
    expect(store.row(ID)).toMatchObject({ state: 'completed', attempts: 2 });
    expect(store.row(ID)!.response).toBe(decision.kind === 'replay' ? decision.stored : undefined);
    expect(store.row(ID)!.response).toMatchObject({ status: 502, outcomeUnknown: true });
    expect(request.log).toMatchObject({ attempts: 2, outcomeUnknown: true });
  });

  it('takes over a lease that ended under retry, fencing out the first holder', async () => {
    const store = seeded('lease-over');
    await decide(depsFor(store), requestFor(routeWith('unknownOutcome: retry')), call, undefined);
    expect(store.row(ID)).toMatchObject({ state: 'in_progress' });
    expect(store.row(ID)!.token).not.toBe(SEEDED_FENCE);
    expect(await store.complete(ID, SEEDED_FENCE, STORED, 1_000)).toBe(false);
  });

  it('leaves the record alone in shadow mode, whatever enforcement would do', async () => {
    for (const seed of ['completed', 'mismatch', 'running', 'lease-over'] as const) {
      const store = seeded(seed);
      const before = { ...store.row(ID)! };
      await decide(depsFor(store), requestFor(routeWith('enforce: false')), call, undefined);
      const counters = { attempts: before.attempts, replays: before.replays };
      expect({ ...store.row(ID)!, ...counters }).toEqual(before);
      expect(store.calls).toEqual(['claim']);
    }
  });
});

describe('waiting (onConcurrent: wait)', () => {
  it('replays what the first request stores while this one waits', async () => {
    const store = seeded('running');
    const request = requestFor(routeWith('onConcurrent: wait, waitTimeout: 5s'));
    const decided = decide(depsFor(store), request, call, undefined);
    setTimeout(() => void store.complete(ID, SEEDED_FENCE, STORED, 60_000), 50);
    expect(summary(await decided)).toBe('replay');
    expect(store.calls.filter((operation) => operation === 'claim')).toHaveLength(2);
  });

  it('forwards itself when the first request is released', async () => {
    const store = seeded('running');
    const request = requestFor(routeWith('onConcurrent: wait, waitTimeout: 5s'));
    const decided = decide(depsFor(store), request, call, undefined);
    setTimeout(() => void store.release(ID, SEEDED_FENCE), 50);
    expect(summary(await decided)).toBe('forward under a new fence');
  });

  it('stops when its client leaves', async () => {
    const store = seeded('running');
    const request = requestFor(routeWith('onConcurrent: wait, waitTimeout: 5s'));
    const decided = decide(depsFor(store), request, call, undefined);
    setTimeout(() => (request.res as unknown as EventEmitter).emit('close'), 50);
    expect(summary(await decided)).toBe('client-gone');
  });
});

describe('a store that fails', () => {
  it('is one typed error, whatever the operation, and nothing is decided', async () => {
    for (const seed of ['absent', 'running', 'lease-over'] as const) {
      const store = seeded(seed);
      store.failWith = Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' });
      const request = requestFor(routeWith('onConcurrent: wait'));
      await expect(decide(depsFor(store), request, call, undefined)).rejects.toBeInstanceOf(
        StoreUnavailable,
      );
    }
  });
});
