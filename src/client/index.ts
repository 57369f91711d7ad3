// idempotency-proxy/client: what an agent needs to call tools through the proxy — deterministic keys
// and a fetch that retries with the same key. Imports nothing but node:crypto, so it loads without
// the proxy's own dependencies (pg, undici, http-proxy).
export { DEFAULT_KEY_NAMESPACE, businessKey, stepKey } from './keys';
export type { BusinessKeyParts, StepKeyInput } from './keys';
export { NAMESPACE_DNS, NAMESPACE_URL, uuidV5 } from './uuid-v5';
export {
  DEFAULT_KEY_HEADER,
  DEFAULT_REPLAYED_HEADER,
  IdempotentFetchError,
  OUTCOME_HEADER,
  idempotentFetch,
} from './idempotent-fetch';
export type {
  IdempotencyOutcome,
  IdempotentFetchErrorCode,
  IdempotentFetchInit,
  IdempotentResponse,
  RetryInfo,
} from './idempotent-fetch';
export { DEFAULT_RETRY_POLICY } from './retry-policy';
export type { RetryPolicy, RetryReason } from './retry-policy';
export type { ReplayableBody } from './replayable-body';
