// What MCP and A2A make alike of a request they read, and of a replay they write: the verdict on a
// client that left mid-body, on a message the route does not protect, and the marks of a replay.
import type { ServerResponse } from 'node:http';
import { DERIVED_KEY_HEADER } from '../idempotency/derived-key';
import {
  BODY_OMITTED_HEADER,
  type Call,
  type ProtectedRequest,
  type Verdict,
} from '../protected/protocol';
import type { HeaderPairs } from '../store/record';

/** The client went away mid-body: nothing to answer, nothing forwarded. */
export const CLIENT_LEFT: Verdict<never> = {
  kind: 'refuse',
  outcome: { label: 'error' },
  answer: (res: ServerResponse) => res.destroy(),
};

/**
 * A message the route does not protect goes up unstored with the key header it was sent with (its
 * server may dedupe on it itself), under forwardKeyAs like a claimed call's key.
 */
export function passedWithSentKey(body: Buffer): Verdict<never> {
  return { kind: 'pass', body, keyAsSent: true, outcome: { label: 'passthrough' } };
}

/** What marks a replay, as on REST routes. */
export function replayMarks(
  request: ProtectedRequest,
  call: Pick<Call, 'keyDerived'>,
  bodyOmitted: boolean,
): HeaderPairs {
  const extra: [string, string][] = [[request.policy.replayedHeader, 'true']];
  if (call.keyDerived) extra.push([DERIVED_KEY_HEADER, 'true']);
  if (bodyOmitted) extra.push([BODY_OMITTED_HEADER, 'true']);
  return extra;
}
