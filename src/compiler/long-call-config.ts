// The long-call blocks (idempotency.async, idempotency.mcp.tasks: docs/long-calls.md): what they
// compile to, and where async is refused.
import type { IdempotencyBlock } from '../config/schema';
import { LONG_CALL_DEFAULTS } from '../config/long-call-schema';
import type { IssuePath, PathIssue } from '../config/path-issue';
import type { LongCallPolicy } from '../config/types';
import { parseDurationMs } from '../config/units';

export function compileLongCall(block: {
  readonly after?: string;
  readonly pollInterval?: string;
}): LongCallPolicy {
  return {
    afterMs: parseDurationMs(block.after ?? LONG_CALL_DEFAULTS.after),
    pollIntervalMs: parseDurationMs(block.pollInterval ?? LONG_CALL_DEFAULTS.pollInterval),
  };
}

/**
 * `Prefer: respond-async` is an HTTP preference a REST client sends; an MCP or A2A route answers in
 * its protocol's own messages, so idempotency.async there would never apply. A profile's route
 * (ACP, UCP) scopes keys by path, which its monitor could not find again.
 */
export function checkAsync(block: IdempotencyBlock, at: IssuePath): PathIssue[] {
  if (block.async === undefined) return [];
  const message =
    block.mcp !== undefined
      ? 'an MCP route answers slow calls as tasks: use mcp.tasks instead of async'
      : block.a2a !== undefined
        ? 'an A2A route answers in A2A messages, which have no respond-async; remove async'
        : block.profile !== undefined
          ? "a profile's keys are scoped by the request path, which a status monitor's own path does not carry; remove async"
          : undefined;
  return message === undefined ? [] : [{ path: [...at, 'idempotency', 'async'], message }];
}
