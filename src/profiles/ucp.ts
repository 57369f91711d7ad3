// The Universal Commerce Protocol's idempotency contract for its REST binding
// (ucp/docs/specification/shopping/checkout/rest.md, "HTTP Headers" and "Protocol Mechanics";
// ucp/docs/specification/signatures.md, "Replay Protection").
import { DAY_MS, jsonErrorAnswer, type Profile, protocolCode } from './profile';

const REST = 'ucp/docs/specification/shopping/checkout/rest.md';
const SIGNATURES = 'ucp/docs/specification/signatures.md';

/** The proxy's own text names method, path and query too; a UCP repeat is compared by its bytes. */
const REUSED =
  'This key was already used with a different request body (its bytes differ). Use a new key for a new request, or resend the original body byte for byte to get its stored response.';

export const UCP: Profile = {
  name: 'ucp',
  protocol: 'Universal Commerce Protocol',
  rules: [
    {
      rule: 'Store the key with the operation result for at least 24 hours',
      proxy: '`check` refuses a `ttl` under 24 h (UCP recommends 48 h)',
      source: `${REST}, Specific Header Requirements; ${SIGNATURES}, Replay Protection`,
    },
    {
      rule: 'Return the cached result for duplicate keys whose request body matches the original',
      proxy: 'the stored status, headers and body are replayed, with `Idempotent-Replayed: true`',
      source: `${REST}, Specific Header Requirements`,
    },
    {
      rule: 'Return `409 Conflict` if the key is reused with a mismatched body',
      proxy: '409 `{"code":"idempotency_conflict","content":…}`, not forwarded',
      source: `${REST}, Specific Header Requirements`,
    },
    {
      rule: 'comparing the SHA-256 hash of the raw body bytes',
      proxy:
        'the fingerprint is the body’s bytes alone, never parsed or canonicalised: other whitespace or key order is another payload; `check` refuses `fingerprint`',
      source: `${SIGNATURES}, Replay Protection`,
    },
    {
      rule: 'Proxies, API gateways, and other intermediaries MUST NOT re-serialize JSON bodies',
      proxy: 'the body reaches the upstream byte for byte as sent',
      source: `${SIGNATURES}, REST Binding`,
    },
    {
      rule: 'On storage failure: Fail closed (reject request with 503)',
      proxy:
        'a store that cannot be reached answers 503 `store_unavailable` with `Retry-After`, nothing forwarded; `check` refuses `enforce: false`',
      source: `${SIGNATURES}, Replay Protection`,
    },
    {
      rule: 'Protocol errors: Return appropriate HTTP status code (401, 403, 409, 429, 503) with JSON body containing `code` and `content`',
      proxy:
        'every answer of the proxy’s own on the route is `application/json` `{"code","content"}`; the idempotency errors use `idempotency_key_required`, `idempotency_key_invalid`, `idempotency_in_flight` and `idempotency_conflict`, the others the proxy’s code in lower case',
      source: `${REST}, Error Responses`,
    },
    {
      rule: '`409 Conflict`: The request could not be completed due to a conflict',
      proxy:
        'a repeat while the first request is in flight is answered 409 `idempotency_in_flight` with `Retry-After` (UCP names no status of its own for it)',
      source: `${REST}, Status Codes`,
    },
    {
      rule: 'Uniqueness: Per-client, per-operation type',
      proxy: 'keys are scoped by the route and its `tenant`, which `check` requires',
      source: `${SIGNATURES}, Replay Protection`,
    },
  ],
  minRetentionMs: DAY_MS,
  maxKeyLength: null,
  keyRequired: false,
  headerKeyOnly: false,
  fingerprint: [{ kind: 'raw-body' }],
  neverStores: () => false,
  onConcurrent: null,
  unknownOutcome: null,
  echoKeyAs: null,
  replayedHeader: null,
  scopeByPath: false,
  errorShape: (error) =>
    jsonErrorAnswer(error, error.code === 'IDEMPOTENCY_KEY_REUSED' ? 409 : error.status, {
      code: protocolCode(error.code),
      content: error.code === 'IDEMPOTENCY_KEY_REUSED' ? REUSED : error.message,
    }),
};
