// Every store call of a protected request goes through storeCall: it is timed into the request's
// timings and the metrics, published for the tracer (observability/tracing.ts: storeCalls), and a
// failure becomes one typed error, StoreUnavailable, that the
// pipeline answers with 503 (fail closed) — or, in shadow mode, with "forward anyway". A repeat
// whose leader lost the store (store/coalescing-store.ts) fails the same way, without logging the
// leader's failure a second time.
import { performance } from 'node:perf_hooks';
import { isPoolExhausted } from '../db/store-failure';
import { ProxyError } from '../errors';
import { LeaderLostStore } from '../store/coalescing-store';
import type { ClaimResult, Landing } from '../store/record';
import { type StoreCallEvent, storeCalls } from '../observability/tracing';
import { type ProtectedDeps, type ProtectedRequest, UnreadableCall } from './protocol';

const STORE_RETRY_AFTER_SECONDS = 1;

/** The store failed before the request could be forwarded: nothing was. */
export class StoreUnavailable extends Error {
  constructor(
    readonly operation: string,
    options: { cause: unknown },
  ) {
    super(`the idempotency store failed during ${operation}`, options);
    this.name = 'StoreUnavailable';
  }
}

/**
 * Runs a store operation; a failure is logged and thrown as StoreUnavailable. UnreadableCall passes
 * as it is: the request itself could not be read (a lazily computed fingerprint), not the store.
 */
export function storeCall<T>(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  operation: string,
  call: () => Promise<T>,
): Promise<T> {
  return timed(deps, request, operation, call, fromStore);
}

/** A store call other than a claim: always answered by the store. */
const fromStore = (): undefined => undefined;

/**
 * A claim, timed as storeCall times: but a claim that memory answered is not store time and no
 * round trip — a replay from the cache costs none, and a repeat that waited for its leader waited.
 */
export function claimCall(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  call: () => Promise<ClaimResult>,
): Promise<ClaimResult> {
  return timed(deps, request, 'claim', call, claimAnsweredBy);
}

const claimAnsweredBy = (result: ClaimResult): 'cache' | 'leader' | undefined => result.from;

async function timed<T>(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  operation: string,
  call: () => Promise<T>,
  answeredBy: (result: T) => 'cache' | 'leader' | undefined,
): Promise<T> {
  const started = performance.now();
  const published: StoreCallEvent | undefined = storeCalls.start.hasSubscribers
    ? { operation }
    : undefined;
  if (published !== undefined) storeCalls.start.publish(published);
  let failure: unknown;
  let from: 'cache' | 'leader' | undefined;
  try {
    const result = await call();
    from = answeredBy(result);
    return result;
  } catch (error) {
    if (error instanceof UnreadableCall) throw error;
    failure = error;
    // The leader's own store call has logged and counted this failure.
    if (error instanceof LeaderLostStore) from = 'leader';
    else deps.onStoreError(error, operation);
    throw new StoreUnavailable(operation, { cause: error });
  } finally {
    const ms = performance.now() - started;
    if (published !== undefined) {
      published.failure = failure;
      storeCalls.end.publish(published);
    }
    if (from === 'leader' || operation === 'wait') request.timings.wait += ms;
    else if (from === undefined) request.timings.store += ms;
    if (from === undefined) deps.observer?.storeCall(operation, ms, failure);
  }
}

/**
 * A store write after the upstream has answered (complete, release): what became of it (the store
 * sends a failed one again in the background: `queued`), or `failed` when the store gave up on it,
 * which is logged. Either way the client still gets the upstream's answer.
 */
export async function settleStoreCall(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  operation: string,
  call: () => Promise<Landing>,
): Promise<Landing | 'failed'> {
  try {
    return await storeCall(deps, request, operation, call);
  } catch (error) {
    if (error instanceof StoreUnavailable) return 'failed';
    throw error;
  }
}

/**
 * 503 for a protected request the store could not serve: STORE_BUSY when this instance ran out of
 * pool connections (PostgreSQL itself is fine: other instances and a retry soon may get through),
 * STORE_UNAVAILABLE when PostgreSQL could not be reached. Nothing was forwarded either way.
 */
export function storeUnavailableError(
  request: ProtectedRequest,
  key: string,
  cause: unknown,
): ProxyError {
  const options = {
    route: request.route.name,
    key,
    retryAfterSeconds: STORE_RETRY_AFTER_SECONDS,
    cause,
  };
  if (isPoolExhausted(cause))
    return new ProxyError(
      'STORE_BUSY',
      'All of this proxy instance’s connections to the idempotency store are busy, so the request was not forwarded. Retry shortly with the same key.',
      options,
    );
  return new ProxyError(
    'STORE_UNAVAILABLE',
    'The idempotency store (PostgreSQL) cannot be reached, so the request was not forwarded. Retry later with the same key.',
    options,
  );
}
