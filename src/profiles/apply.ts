// A profile turned into the route's policy: the settings the pipeline already reads, so it never
// has to ask which protocol a route speaks.
import type { IdempotencyPolicy } from '../config/types';
import { fingerprintEpoch } from '../idempotency/fingerprint';
import type { Profile } from './profile';

export function applyProfile(policy: IdempotencyPolicy, profile: Profile): IdempotencyPolicy {
  const fingerprint = { parts: profile.fingerprint, ignore: [] };
  const stores = policy.storesStatus;
  return {
    ...policy,
    key: { ...policy.key, required: profile.keyRequired || policy.key.required },
    onConcurrent: profile.onConcurrent ?? policy.onConcurrent,
    unknownOutcome: profile.unknownOutcome ?? policy.unknownOutcome,
    fingerprint,
    fingerprintEpoch: fingerprintEpoch(fingerprint),
    storesStatus: (status) => stores(status) && !profile.neverStores(status),
    profile: profile.name,
    errorShape: profile.errorShape,
    echoKeyAs: profile.echoKeyAs,
    scopeByPath: profile.scopeByPath,
  };
}
