// idempotency-proxy-client: what an agent needs to call tools through the proxy — deterministic keys
// and a fetch that retries with the same key. Imports nothing but node:crypto, so it loads without
// the proxy's own dependencies (pg, undici, http-proxy).
export { DEFAULT_KEY_NAMESPACE, businessKey, stepKey } from './keys.js';
export type { BusinessKeyParts, StepKeyInput } from './keys.js';
export { NAMESPACE_DNS, NAMESPACE_URL, uuidV5 } from './uuid-v5.js';
export {
  DEFAULT_KEY_HEADER,
  DEFAULT_REPLAYED_HEADER,
  IdempotentFetchError,
  OUTCOME_HEADER,
  idempotentFetch,
} from './idempotent-fetch.js';
export type {
  IdempotencyOutcome,
  IdempotentFetchErrorCode,
  IdempotentFetchInit,
  IdempotentResponse,
  RetryInfo,
} from './idempotent-fetch.js';
export { DEFAULT_RETRY_POLICY } from './retry-policy.js';
export type { RetryPolicy, RetryReason } from './retry-policy.js';
export type { ReplayableBody } from './replayable-body.js';
