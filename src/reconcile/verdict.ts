// What a probe's answer says about the original call (docs/reconcile.md). Pure: status and body in,
// found (with the answer every repeat gets), not found, or inconclusive (with why) out.
import type { ReconcilePolicy } from '../config/types';
import { valueAtPointer } from '../idempotency/json-pointer';
import type { HeaderPairs, StoredResponse } from '../store/record';

export const RECONCILED = 'reconciled';

export type ProbeVerdict =
  | { readonly kind: 'found'; readonly response: StoredResponse }
  | { readonly kind: 'not-found' }
  | { readonly kind: 'inconclusive'; readonly reason: string };

export interface ProbeAnswer {
  readonly status: number;
  readonly contentType: string | undefined;
  readonly body: Buffer;
}

/** A probe's answer read under the route's found / notFound / answer rules. */
export function verdictOf(policy: ReconcilePolicy, answer: ProbeAnswer): ProbeVerdict {
  const { status } = answer;
  if (policy.foundStatus.includes(status)) {
    const needsJson = policy.exists !== null || policy.answerBody !== null;
    let document: unknown;
    if (needsJson) {
      try {
        document = JSON.parse(answer.body.toString('utf8')) as unknown;
      } catch {
        return {
          kind: 'inconclusive',
          reason: `the probe answered ${status} with a body that is not JSON, where a JSON pointer is needed`,
        };
      }
    }
    if (policy.exists !== null && valueAtPointer(document, policy.exists) === undefined)
      return { kind: 'not-found' };
    return foundAnswer(policy, answer, document);
  }
  if (policy.notFoundStatus.includes(status)) return { kind: 'not-found' };
  return {
    kind: 'inconclusive',
    reason: `the probe answered ${status}, neither a found status (${policy.foundStatus.join(', ')}) nor a not-found one (${policy.notFoundStatus.join(', ')})`,
  };
}

function foundAnswer(
  policy: ReconcilePolicy,
  answer: ProbeAnswer,
  document: unknown,
): ProbeVerdict {
  let body = answer.body;
  let contentType = answer.contentType;
  if (policy.answerBody !== null) {
    const part = valueAtPointer(document, policy.answerBody);
    if (part === undefined)
      return {
        kind: 'inconclusive',
        reason: `the probe's body has no /${policy.answerBody.join('/')} for answer.body`,
      };
    body = Buffer.from(JSON.stringify(part));
    contentType = 'application/json';
  }
  const headers: HeaderPairs = [
    ...(contentType === undefined ? [] : [['content-type', contentType] as const]),
    ['idempotency-outcome', RECONCILED],
  ];
  return {
    kind: 'found',
    response: {
      status: policy.answerStatus ?? answer.status,
      headers,
      body,
      bodyOmitted: false,
      outcomeUnknown: false,
    },
  };
}
