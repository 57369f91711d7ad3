// The blocks that let a slow call be answered with a handle instead of a wait (docs/long-calls.md):
// idempotency.async (HTTP `Prefer: respond-async`, REST routes) and idempotency.mcp.tasks (the MCP
// tasks extension). `true` stands for an empty block: the defaults.
import { opt, orFlag, strict, timer } from './schema-formats';

export const LONG_CALL_DEFAULTS = { after: '5s', pollInterval: '2s' } as const;

const after = opt(
  timer,
  'How long the upstream has to answer before the client gets a handle to poll instead (the call goes on, and its answer is stored as any other); keep lockTimeout longer than the longest call.',
  LONG_CALL_DEFAULTS.after,
);
const pollInterval = opt(
  timer,
  'How often a client is asked to poll (Retry-After, pollIntervalMs); an MCP task also looks this often whether its cancel was asked for.',
  LONG_CALL_DEFAULTS.pollInterval,
);

export const asyncBlock = strict(
  { after, pollInterval },
  'respond-async settings (after, pollInterval)',
);
export const asyncOrFlag = orFlag(asyncBlock);

export const tasksBlock = strict(
  {
    after,
    ttl: opt(
      timer,
      "How long a call answered as a task keeps its result once done: its record's ttl (default: the route's ttl).",
    ),
    pollInterval,
  },
  'MCP tasks settings (after, ttl, pollInterval)',
);
export const tasksOrFlag = orFlag(tasksBlock);
