// The Agentic Commerce Protocol's idempotency contract (2026-04-17; rfcs/rfc.agentic_checkout.md
// §6, "Idempotency, Retries & Concurrency", and §3.1 for the error shape and the echoed key).
import { DAY_MS, jsonErrorAnswer, type Profile, protocolCode } from './profile';

const RFC = 'rfcs/rfc.agentic_checkout.md';

/** The proxy's own text names method, path and query too; an ACP repeat is compared by its body. */
const REUSED =
  'Idempotency-Key has already been used with a different request body. Use a new key for a new request, or resend the original body to get its stored response.';

export const ACP: Profile = {
  name: 'acp',
  protocol: 'Agentic Commerce Protocol 2026-04-17',
  rules: [
    {
      rule: 'Clients MUST include an `Idempotency-Key` header on every POST request',
      proxy:
        'a request without the header is answered 400 `idempotency_key_required` and not forwarded; `check` refuses `key.required: false`, `key.body` and `key.derive`',
      source: `${RFC}, 6.1 Idempotency-Key Requirement`,
    },
    {
      rule: 'The key is an opaque string, max 255 characters',
      proxy:
        'a longer key is answered 400 `idempotency_key_invalid` and not forwarded; `check` refuses `key.maxLength` above 255',
      source: `${RFC}, 6.1 Idempotency-Key Requirement`,
    },
    {
      rule: 'Servers MUST scope keys to the authenticated identity + endpoint path',
      proxy:
        'keys are scoped by the route’s `tenant` (which `check` requires) and the request path: the same key on another path is another request',
      source: `${RFC}, 6.1 Idempotency-Key Requirement`,
    },
    {
      rule: 'Equivalence is determined by semantic JSON equality of the request body only; headers are excluded',
      proxy:
        'the fingerprint is the canonical JSON of the body alone (key order and number spelling do not matter; `null` differs from an absent member; arrays keep their order); `check` refuses `fingerprint`',
      source: `${RFC}, 6.2 Request Equivalence`,
    },
    {
      rule: 'Same key + identical body → server MUST return the original response with the same HTTP status code',
      proxy:
        'the stored status, headers and body are replayed, with `Idempotent-Replayed: true`; `check` refuses another `replayedHeader`',
      source: `${RFC}, 6.3 Replay Behavior`,
    },
    {
      rule: 'Same key, different body: 422 `idempotency_conflict`',
      proxy: '422 `{"type":"invalid_request","code":"idempotency_conflict",…}`, not forwarded',
      source: `${RFC}, 6.4 Error Responses`,
    },
    {
      rule: 'Same key, original request still in flight: 409 `idempotency_in_flight`',
      proxy:
        '409 `{"type":"invalid_request","code":"idempotency_in_flight",…}` with `Retry-After` (seconds left on the first request’s lease); `check` refuses `onConcurrent: wait` and `attach`',
      source: `${RFC}, 6.4 Error Responses`,
    },
    {
      rule: 'Error Shape (flat): `type`, `code`, `message`, `param`',
      proxy:
        'every answer of the proxy’s own on the route is a flat `application/json` object with `type` (`invalid_request` for 4xx, `service_unavailable` for 503, `processing_error` for other 5xx), `code` and `message`; the idempotency errors use the three codes above, the others the proxy’s code in lower case (`store_unavailable`)',
      source: `${RFC}, 3.1 Common Requirements`,
    },
    {
      rule: 'Responses with HTTP 5xx status codes MUST NOT be cached against the idempotency key',
      proxy:
        'an upstream 5xx releases the key instead of storing it, whatever `store` lists; an unknown outcome is never stored (`unknownOutcome: retry`, `check` refuses `fail`)',
      source: `${RFC}, 6.5 Server Error Caching`,
    },
    {
      rule: 'A retry with the same key after a 5xx MUST be processed as a fresh request',
      proxy: 'the retry is forwarded again, with the same key',
      source: `${RFC}, 6.5 Server Error Caching`,
    },
    {
      rule: 'Servers MUST retain idempotency key → response mappings for at least 24 hours',
      proxy: '`check` refuses a `ttl` under 24 h',
      source: `${RFC}, 6.6 Key Retention`,
    },
    {
      rule: '`Idempotency-Key` — echo on all POST responses',
      proxy:
        'every answer to a request with a valid key carries it in `Idempotency-Key`: the upstream’s (unless it sent one), a replay, and the proxy’s own errors',
      source: `${RFC}, 3.1 Common Requirements`,
    },
  ],
  minRetentionMs: DAY_MS,
  maxKeyLength: 255,
  keyRequired: true,
  headerKeyOnly: true,
  fingerprint: [{ kind: 'body' }],
  neverStores: (status) => status >= 500,
  onConcurrent: 'reject',
  unknownOutcome: 'retry',
  echoKeyAs: 'Idempotency-Key',
  replayedHeader: 'Idempotent-Replayed',
  scopeByPath: true,
  errorShape: (error) =>
    jsonErrorAnswer(error, error.status, {
      type:
        error.status === 503
          ? 'service_unavailable'
          : error.status >= 500
            ? 'processing_error'
            : 'invalid_request',
      code: protocolCode(error.code),
      message: error.code === 'IDEMPOTENCY_KEY_REUSED' ? REUSED : error.message,
    }),
};
