// Derived keys (`key.derive`, `key.window`: config/README.md): a request sent without a key header
// on a route that names `derive` parts gets a key computed from those parts, so identical payloads
// inside the window run once even though the client never sent a key.
//
//   no key header ─► key = "derived:" + base64url(SHA-256 over the derive parts, `ignore` applied)
//                    record lives for key.window (not ttl) ─► then the same payload runs again
//
// The "derived:" prefix cannot be mistaken for a client key of another form: a log line, an admin
// lookup or the upstream can tell the two apart, and a client that sends exactly this string as its
// key is asking for exactly this record. The hash is framed and domain-separated like fingerprints
// (fingerprint.ts), so a derived key never equals a fingerprint of the same parts.
import type { FingerprintPolicy, IdempotencyPolicy, RequestPart } from '../config/types';
import { type FingerprintInput, hashRequestParts } from './fingerprint';

export const DERIVED_KEY_PREFIX = 'derived:';
/** base64url of 32 bytes, unpadded: 43 characters. */
export const DERIVED_KEY_LENGTH = DERIVED_KEY_PREFIX.length + 43;
/** Added with `true` to a replay whose key was derived, next to the replay marker. */
export const DERIVED_KEY_HEADER = 'Idempotency-Key-Derived';

/** Hash domain; FramedHash prefixes it with "idempotency-proxy/". Changing it orphans every record. */
const DOMAIN = 'derived-key/v1';

/**
 * The derived key of a request: visible ASCII, always DERIVED_KEY_LENGTH characters (config
 * compilation checks that `key.maxLength` allows it). The fingerprint's `ignore` paths apply here
 * too (docs/README.md#small-rules), so a volatile field such as a timestamp never makes a repeat
 * look new.
 */
export function deriveKey(
  parts: readonly RequestPart[],
  input: FingerprintInput,
  ignore: FingerprintPolicy['ignore'],
): string {
  return DERIVED_KEY_PREFIX + hashRequestParts(DOMAIN, parts, input, ignore).toString('base64url');
}

/** Policies whose record lifetime is `key.window`, one per route policy (policies are frozen). */
const windowPolicies = new WeakMap<IdempotencyPolicy, IdempotencyPolicy>();

/**
 * The route's policy as a request with a derived key sees it: the record lives for `key.window`
 * instead of `ttl` (docs/README.md#small-rules), in the claim's expiry and in every completion
 * alike. Without a window the ttl applies. Built once per policy, not per request.
 */
export function derivedKeyPolicy(policy: IdempotencyPolicy): IdempotencyPolicy {
  const windowMs = policy.key.windowMs;
  if (windowMs === null) return policy;
  let derived = windowPolicies.get(policy);
  if (derived === undefined) {
    derived = Object.freeze({ ...policy, ttlMs: windowMs });
    windowPolicies.set(policy, derived);
  }
  return derived;
}
