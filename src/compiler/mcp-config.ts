// An MCP route's block (idempotency.mcp, src/mcp/README.md): what it refuses beside it, and what it
// compiles to. Beside reconcile-config.ts, one file per feature of a route's policy.
import { DERIVED_KEY_LENGTH, DERIVED_KEY_PREFIX } from '../idempotency/derived-key';
import type { IdempotencyBlock } from '../config/schema';
import { IDEMPOTENCY_DEFAULTS as BUILT_IN } from '../config/schema-formats';
import type { McpPolicy } from '../config/types';
import type { IssuePath, PathIssue } from '../config/path-issue';
import { type Setting, settingOf } from '../config/setting';
import { parseDurationMs } from '../config/units';
import { compileLongCall } from './long-call-config';

/**
 * An MCP route keys and fingerprints tool calls itself (src/mcp/README.md), from the tool name and
 * its arguments: the REST settings for that would be silently ignored, so they are refused here.
 */
export function checkMcpRoute(
  block: IdempotencyBlock,
  defaults: IdempotencyBlock | undefined,
  at: IssuePath,
): PathIssue[] {
  const issues: PathIssue[] = [];
  const own = [...at, 'idempotency'];
  if (block.key?.derive !== undefined)
    issues.push({
      path: [...own, 'key', 'derive'],
      message:
        'an MCP route derives a missing key from the tool name and arguments; remove key.derive (mcp.ignore leaves arguments out)',
    });
  if (block.fingerprint !== undefined)
    issues.push({
      path: [...own, 'fingerprint'],
      message:
        'an MCP route fingerprints the tool name and arguments; remove fingerprint (use mcp.ignore to leave arguments out)',
    });
  const maxLength = keyMaxLength(block, defaults, own);
  if (maxLength.value < DERIVED_KEY_LENGTH) {
    issues.push({
      path: maxLength.path,
      message: `expected at least ${DERIVED_KEY_LENGTH} on an MCP route: a key derived from a tool call ("${DERIVED_KEY_PREFIX}" and a base64url SHA-256) is ${DERIVED_KEY_LENGTH} characters long`,
    });
  }
  return issues;
}

export function compileMcp(block: NonNullable<IdempotencyBlock['mcp']>): McpPolicy {
  const tools = block.tools ?? ['*'];
  const exact = new Set(tools.filter((tool) => !/[*?]/.test(tool)));
  const globs = tools.filter((tool) => /[*?]/.test(tool)).map(globPattern);
  const tasks = block.tasks;
  return {
    protects: (tool) => exact.has(tool) || globs.some((glob) => glob.test(tool)),
    tools,
    ignore: (block.ignore ?? []).map((field) => field.split('.').slice(1)),
    tasks:
      tasks === undefined
        ? null
        : {
            ...compileLongCall(tasks),
            ttlMs: tasks.ttl === undefined ? null : parseDurationMs(tasks.ttl),
          },
  };
}

/** `refund_*` → /^refund_.*$/: `*` is any run of characters, `?` one, everything else literal. */
function globPattern(glob: string): RegExp {
  const source = [...glob]
    .map((char) =>
      char === '*' ? '.*' : char === '?' ? '.' : char.replace(/[\\^$.|+()[\]{}]/g, '\\$&'),
    )
    .join('');
  return new RegExp(`^${source}$`, 's');
}

/**
 * key.maxLength as a route has it, and where it was set (the built-in default is told at
 * `defaults`, where a user would set it for every route). A derived key must fit it.
 */
export function keyMaxLength(
  block: IdempotencyBlock,
  defaults: IdempotencyBlock | undefined,
  own: IssuePath,
): Setting<number> {
  const field = ['key', 'maxLength'];
  return (
    settingOf(block, defaults, own, (b) => b.key?.maxLength, field) ?? {
      value: BUILT_IN.key.maxLength,
      path: ['defaults', ...field],
    }
  );
}
