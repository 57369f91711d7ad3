// idempotency.reconcile: checked against the rest of the route (exit 2 with file:line) and compiled
// into the ReconcilePolicy the reconciler runs (docs/reconcile.md).
import { parseJsonPointer } from '../idempotency/json-pointer';
import { parseTemplate } from '../reconcile/template';
import type { IdempotencyBlock, ParsedConfig, ParsedRoute } from '../config/schema';
import { IDEMPOTENCY_DEFAULTS as BUILT_IN } from '../config/schema-formats';
import { inheritedValue } from '../config/setting';
import type { ReconcilePolicy } from '../config/types';
import { parseDurationMs } from '../config/units';
import type { IssuePath, PathIssue } from '../config/path-issue';

type ReconcileBlock = NonNullable<IdempotencyBlock['reconcile']>;

const AFTER = '5s';
const EVERY = '30s';
const GIVE_UP_AFTER = '24h';

/** What is wrong with the reconcile blocks of a config, each at its path. */
export function checkReconcile(parsed: ParsedConfig): PathIssue[] {
  const issues: PathIssue[] = [];
  if (parsed.defaults?.reconcile !== undefined)
    issues.push({
      path: ['defaults', 'reconcile'],
      message:
        'a probe asks one upstream; set reconcile on the route it belongs to, not in defaults',
    });
  parsed.routes.forEach((route, i) => {
    const own = route.idempotency;
    if (typeof own !== 'object' || own.reconcile === undefined) return;
    issues.push(...checkRoute(parsed, route, own, ['routes', i, 'idempotency', 'reconcile']));
  });
  return issues;
}

function checkRoute(
  parsed: ParsedConfig,
  route: ParsedRoute,
  block: IdempotencyBlock,
  at: IssuePath,
): PathIssue[] {
  const issues: PathIssue[] = [];
  const add = (path: IssuePath, message: string) => issues.push({ path, message });
  const reconcile = block.reconcile!;
  const unknownOutcome = block.unknownOutcome ?? parsed.defaults?.unknownOutcome;
  if ((unknownOutcome ?? BUILT_IN.unknownOutcome) === 'retry')
    add(
      at,
      'reconcile resolves outcomes stored as unknown (unknownOutcome: fail); under retry a repeat forwards again after the lease: remove one of them',
    );
  if ((inheritedValue(block, parsed.defaults, (b) => b.enforce) ?? BUILT_IN.enforce) === false)
    add(at, 'a shadow-mode route (enforce: false) stores no unknown outcomes to reconcile');
  if (block.a2a !== undefined) add(at, 'an A2A route has no probe yet; remove reconcile');
  const mcp = block.mcp !== undefined;
  if (mcp && reconcile.request !== undefined)
    add([...at, 'request'], 'an MCP route asks with a tool call: use reconcile.tool');
  if (mcp && reconcile.tool !== undefined && /[:*]/.test(route.match.path))
    add(
      ['routes', at[1]!, 'match', 'path'],
      "a probe tool call is sent to the MCP endpoint: with reconcile.tool, match.path must be the endpoint's exact path (like /mcp)",
    );
  if (!mcp && reconcile.tool !== undefined)
    add([...at, 'tool'], 'reconcile.tool is for MCP routes: use reconcile.request');
  if (reconcile.request === undefined && reconcile.tool === undefined)
    add(at, `expected reconcile.${mcp ? 'tool' : 'request'}: how to ask the upstream`);
  if (reconcile.request !== undefined) {
    const parts = parseTemplate(reconcile.request.path, 'body');
    if (typeof parts === 'string') add([...at, 'request', 'path'], parts);
  }
  if (reconcile.tool?.arguments !== undefined)
    for (const [path, text] of stringsIn(reconcile.tool.arguments, [])) {
      const parts = parseTemplate(text, 'arguments');
      if (typeof parts === 'string') add([...at, 'tool', 'arguments', ...path], parts);
    }
  const upstream = parsed.upstreams[route.upstream];
  const after = parseDurationMs(reconcile.after ?? AFTER);
  if (upstream !== undefined) {
    const timeoutMs = parseDurationMs(upstream.timeout);
    if (after < timeoutMs)
      add(
        [...at, 'after'],
        `expected at least the upstream's timeout (${upstream.timeout}): an original still running must not be read as not found`,
      );
  }
  return issues;
}

/** Every string inside a JSON value, with its path. */
function stringsIn(value: unknown, path: (string | number)[]): [(string | number)[], string][] {
  if (typeof value === 'string') return [[path, value]];
  if (Array.isArray(value)) return value.flatMap((item, i) => stringsIn(item, [...path, i]));
  if (typeof value === 'object' && value !== null)
    return Object.entries(value).flatMap(([name, item]) => stringsIn(item, [...path, name]));
  return [];
}

/** The compiled policy of a checked block. */
export function compileReconcile(block: ReconcileBlock): ReconcilePolicy {
  const probe: ReconcilePolicy['probe'] = block.tool
    ? { kind: 'tool', name: block.tool.name, arguments: block.tool.arguments ?? {} }
    : {
        kind: 'request',
        method: (block.request?.method ?? 'GET').toUpperCase(),
        path: block.request?.path ?? '/',
        headers: block.request?.headers
          ? Object.fromEntries(
              Object.entries(block.request.headers).map(([name, value]) => [
                name.toLowerCase(),
                value,
              ]),
            )
          : null,
      };
  return {
    probe,
    foundStatus: block.found?.status ?? [200],
    exists: block.found?.exists === undefined ? null : parseJsonPointer(block.found.exists),
    notFoundStatus: block.notFound?.status ?? [404],
    answerStatus: block.answer?.status ?? null,
    answerBody: block.answer?.body === undefined ? null : parseJsonPointer(block.answer.body),
    afterMs: parseDurationMs(block.after ?? AFTER),
    everyMs: parseDurationMs(block.every ?? EVERY),
    giveUpAfterMs: parseDurationMs(block.giveUpAfter ?? GIVE_UP_AFTER),
  };
}
