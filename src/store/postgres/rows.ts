// The rows the KeyStore's statements return, and what they mean as claim results and stored
// responses.
import type { ClaimResult, HeaderPairs, StoredResponse } from '../record';

/**
 * The claim statement's RETURNING list, in order (rowMode: 'array'); a batch's rows add the key
 * (scope, tenant, key) after it.
 */
export type ClaimRowValues = [
  claim_token: string,
  state: string,
  fingerprint: Buffer,
  status: number | null,
  headers: [string, string][] | null,
  body: Buffer | null,
  body_omitted: boolean,
  outcome_unknown: boolean,
  attempts: number,
  lease_remaining_ms: number,
  expires_in_ms: number,
  expires_at_ms: number,
];

/** A batch's claim row: the values, then the key. */
export type BatchClaimRowValues = [...ClaimRowValues, scope: string, tenant: string, key: string];

export interface ResponseRow {
  status: number;
  headers: [string, string][];
  body: Buffer | null;
  body_omitted: boolean;
  outcome_unknown: boolean;
  /** The record's expiry in epoch ms, where the statement returns it. */
  expires_at_ms?: number;
}

export interface PeekRow {
  state: string;
  same_fingerprint: boolean;
  expired: boolean;
  lease_remaining_ms: number;
}

export function toResponse(row: ResponseRow): StoredResponse {
  return {
    status: row.status,
    headers: (row.headers ?? []) as HeaderPairs,
    body: row.body ?? Buffer.alloc(0),
    bodyOmitted: row.body_omitted,
    outcomeUnknown: row.outcome_unknown,
    expiresAt: row.expires_at_ms,
  };
}

/**
 * What a claim's row means to the request that sent `token` with `fingerprint`. Read from the row's
 * array as it came: a new key's claim (the common case) reads two of its values.
 */
export function claimResultOf(
  values: ClaimRowValues | BatchClaimRowValues,
  token: string,
  fingerprint: Buffer,
): ClaimResult {
  const claimToken = values[0];
  const attempts = values[8];
  if (claimToken === token) return { kind: 'claimed', fence: claimToken, attempts };
  if (!values[2].equals(fingerprint)) return { kind: 'mismatch', attempts };
  if (values[1] === 'completed') {
    return {
      kind: 'completed',
      response: toResponse({
        status: values[3]!,
        headers: values[4]!,
        body: values[5],
        body_omitted: values[6],
        outcome_unknown: values[7],
        expires_at_ms: values[11],
      }),
      expiresInMs: values[10],
      attempts,
    };
  }
  return { kind: 'in-flight', fence: claimToken, leaseRemainingMs: values[9], attempts };
}
