// An A2A route's block (idempotency.a2a, src/a2a/README.md): what it refuses beside it. It compiles
// to nothing yet: the block marks the route.
import type { IdempotencyBlock } from '../config/schema';
import type { IssuePath, PathIssue } from '../config/path-issue';

/**
 * An A2A route keys a send by its message.messageId (or the key header) and fingerprints the
 * message (src/a2a/README.md): REST settings for either would be silently ignored, so they are
 * refused here, as is an MCP block beside it.
 */
export function checkA2aRoute(block: IdempotencyBlock, at: IssuePath): PathIssue[] {
  const own = [...at, 'idempotency'];
  const issues: PathIssue[] = [];
  if (block.mcp !== undefined)
    issues.push({
      path: [...own, 'a2a'],
      message: 'a route fronts an MCP server or an A2A agent, not both; remove mcp or a2a',
    });
  if (block.key?.derive !== undefined)
    issues.push({
      path: [...own, 'key', 'derive'],
      message:
        'an A2A route keys a send by message.messageId (or the key header); remove key.derive',
    });
  if (block.key?.body !== undefined)
    issues.push({
      path: [...own, 'key', 'body'],
      message: 'an A2A route keys a send by message.messageId (or the key header); remove key.body',
    });
  if (block.fingerprint !== undefined)
    issues.push({
      path: [...own, 'fingerprint'],
      message: 'an A2A route fingerprints the message it sends; remove fingerprint',
    });
  return issues;
}
