// The rows the KeyStore's statements return, and what they mean as claim results and stored
// responses.
import type { ClaimResult, HeaderPairs, StoredResponse } from '../record';

export interface ClaimRow {
  scope: string;
  tenant: string;
  key: string;
  claim_token: string;
  state: string;
  fence: string;
  fingerprint: Buffer;
  status: number | null;
  headers: [string, string][] | null;
  body: Buffer | null;
  body_omitted: boolean;
  outcome_unknown: boolean;
  lease_remaining_ms: number;
  attempts: number;
  expires_in_ms: number;
}

/** The claim statement's RETURNING list, in order (rowMode: 'array'). */
export type ClaimRowValues = [
  scope: string,
  tenant: string,
  key: string,
  claim_token: string,
  state: string,
  fence: string,
  fingerprint: Buffer,
  status: number | null,
  headers: [string, string][] | null,
  body: Buffer | null,
  body_omitted: boolean,
  outcome_unknown: boolean,
  attempts: number,
  lease_remaining_ms: number,
  expires_in_ms: number,
];

export function claimRow(values: ClaimRowValues): ClaimRow {
  const [scope, tenant, key, claim_token, state, fence, fingerprint, status, headers, body] =
    values;
  return {
    scope,
    tenant,
    key,
    claim_token,
    state,
    fence,
    fingerprint,
    status,
    headers,
    body,
    body_omitted: values[10],
    outcome_unknown: values[11],
    attempts: values[12],
    lease_remaining_ms: values[13],
    expires_in_ms: values[14],
  };
}

export interface ResponseRow {
  status: number;
  headers: [string, string][];
  body: Buffer | null;
  body_omitted: boolean;
  outcome_unknown: boolean;
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
  };
}

export function toClaimResult(row: ClaimRow, token: string, fingerprint: Buffer): ClaimResult {
  const attempts = row.attempts;
  if (row.claim_token === token) return { kind: 'claimed', fence: row.claim_token, attempts };
  if (!row.fingerprint.equals(fingerprint)) return { kind: 'mismatch', attempts };
  if (row.state === 'completed') {
    return {
      kind: 'completed',
      response: toResponse(row as ResponseRow),
      expiresInMs: row.expires_in_ms,
      attempts,
    };
  }
  return {
    kind: 'in-flight',
    fence: row.claim_token,
    leaseRemainingMs: row.lease_remaining_ms,
    attempts,
  };
}
