// The protocol blocks of a route's idempotency policy: mcp (which tools, which arguments left out of
// the fingerprint) and a2a (none yet). `true` stands for an empty block.
import { z } from 'zod';
import { tasksOrFlag } from './long-call-schema';
import { duration, opt, orFlag, pattern, strict } from './schema-formats';

export const toolPattern = pattern(
  /^[^\s]+$/,
  'expected a tool name or a glob like "refund_*" (no spaces)',
  'tool name or glob',
);
export const argumentPath = pattern(
  /^arguments(?:\.[^.\s]+)+$/,
  'expected a tool argument like "arguments.trace_id"',
  'argument path',
);

export const mcpBlock = strict(
  {
    tools: opt(
      z.array(toolPattern).min(1, { error: 'expected at least one tool name or glob' }),
      'Tools whose calls run once: names or globs (* and ?). Other tools run on every call.',
      ['*'],
    ),
    ignore: opt(
      z.array(argumentPath),
      'Tool arguments left out of the fingerprint and derived key, like arguments.trace_id.',
      [],
    ),
    window: opt(
      duration({ positive: true }),
      "How long a derived key's record lives (default: key.window, else ttl).",
    ),
    tasks: opt(
      tasksOrFlag,
      'A tools/call from a client that declares the tasks extension (io.modelcontextprotocol/tasks) and is not answered within `after` gets a task to poll with tasks/get (docs/long-calls.md).',
    ),
  },
  'MCP settings (tools, ignore, window, tasks)',
);
export const mcpOrFlag = orFlag(mcpBlock);
export const a2aBlock = strict({}, 'A2A settings (none yet: write a2a: {})');
export const a2aOrFlag = orFlag(a2aBlock);
