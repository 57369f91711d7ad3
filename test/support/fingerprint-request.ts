// One small JSON payment request and the parts a fingerprint reads of it by default: the fixture the
// fingerprint tests vary field by field.
import type { RequestPart } from '../../src/config/types';
import type { FingerprintInput } from '../../src/idempotency/fingerprint';

export const ALL_PARTS: RequestPart[] = [
  { kind: 'method' },
  { kind: 'path' },
  { kind: 'query' },
  { kind: 'body' },
];

export function paymentRequest(overrides: Partial<FingerprintInput> = {}): FingerprintInput {
  return {
    method: 'POST',
    path: '/payments',
    query: '',
    headers: {},
    body: Buffer.from('{"amount":100,"currency":"EUR"}'),
    contentType: 'application/json',
    ...overrides,
  };
}
