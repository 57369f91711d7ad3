// Every store round trip of a protected request goes through storeCall: it is timed into the log and
// the metrics, and a failure becomes one typed error, StoreUnavailable, that decide.ts maps to 503
// (fail closed) — or, in shadow mode, to "forward anyway"; a follower whose leader lost the store
// answers the same 503 (follow-leader.ts).
import { performance } from 'node:perf_hooks';
import { isPoolExhausted } from '../db/store-failure';
import { ProxyError } from '../errors';
import type { ProtectedDeps, ProtectedRequest } from './context';

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

/** Runs a store operation; a failure is logged and thrown as StoreUnavailable. */
export async function storeCall<T>(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  operation: string,
  call: () => Promise<T>,
): Promise<T> {
  const started = performance.now();
  const span = request.trace?.store(operation);
  let failure: unknown;
  try {
    return await call();
  } catch (error) {
    failure = error;
    deps.onStoreError(error, operation);
    throw new StoreUnavailable(operation, { cause: error });
  } finally {
    const ms = performance.now() - started;
    request.log.storeMs += ms;
    deps.observer?.storeCall(operation, ms, failure);
    span?.end(failure);
  }
}

/**
 * A store operation after the upstream has acted (complete, release): its failure is logged and
 * leaves the claim to its lease, and the client still gets the upstream's answer. True when it
 * succeeded.
 */
export async function bestEffortStoreCall(
  deps: ProtectedDeps,
  request: ProtectedRequest,
  operation: string,
  call: () => Promise<unknown>,
): Promise<boolean> {
  try {
    return (await storeCall(deps, request, operation, call)) !== false;
  } catch (error) {
    if (error instanceof StoreUnavailable) return false;
    throw error;
  }
}

/**
 * 503 for a protected request the store could not serve: STORE_BUSY when this instance ran out of
 * pool connections (PostgreSQL itself is fine: other instances and a retry soon may get through),
 * STORE_UNAVAILABLE when PostgreSQL could not be reached. Nothing was forwarded either way.
 */
export function storeUnavailableError(request: ProtectedRequest, cause: unknown): ProxyError {
  const options = {
    route: request.route.name,
    key: request.log.key,
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
