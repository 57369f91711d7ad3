// An MCP route's reconcile probe (docs/reconcile.md): the configured tool call, sent to the route's
// MCP server as a client would — initialize with the newest revision it knows (then speaking the one
// the server answers), the initialized notification, tools/call, and a DELETE that ends the session
// when the server issued one — answered as JSON or as an event stream. Found: a
// result that is not isError and, with `exists`, whose structuredContent has the pointer; the stored
// answer is that result (or the part answer.body names), replayed under each retry's id.
import type { ReconcilePolicy, RouteConfig } from '../config/types';
import { valueAtPointer } from '../idempotency/json-pointer';
import {
  fillTemplate,
  parseDocument,
  parseTemplate,
  TemplateUnfilled,
  valueFor,
} from '../reconcile/template';
import type { ReconcileProbe } from '../reconcile/resolution';
import { RECONCILED, type ProbeVerdict } from '../reconcile/verdict';
import type { UpstreamPools } from '../upstream/protected';
import { JSON_HEADERS, storedMessage } from '../jsonrpc/jsonrpc';

/**
 * The revisions with an initialize handshake the probe speaks, newest first (2026-07-28, which has
 * none, is passed through for clients but not spoken by the probe). A server answers initialize with
 * the one it will use; one outside this list fails the probe, as a client disconnects.
 */
export const PROBE_REVISIONS = ['2025-11-25', '2025-06-18', '2025-03-26', '2024-11-05'] as const;
const MAX_ANSWER_BYTES = 1024 * 1024;

type ToolProbe = Extract<ReconcilePolicy['probe'], { kind: 'tool' }>;

/** MCP's probe: the route's probe tool, called through a session of its own. */
export const toolProbe: ReconcileProbe = (ask) =>
  sendToolProbe(ask.upstreams, ask.route, ask.reconcile, ask.key, ask.body);

/** Calls the probe tool and reads its result; throws when there is no result to read. */
export async function sendToolProbe(
  upstreams: UpstreamPools,
  route: RouteConfig,
  reconcile: ReconcilePolicy,
  key: string,
  body: Buffer | null,
): Promise<ProbeVerdict> {
  const probe = reconcile.probe as ToolProbe;
  const message = body === null ? undefined : parseDocument(body);
  const original = valueAtPointer(message, ['params', 'arguments']);
  const args = fillArguments(probe.arguments, key, original);
  const path = mcpPath(route);
  const session: Record<string, string> = {};
  const init = await post(upstreams, route, path, session, {
    jsonrpc: '2.0',
    id: 1,
    method: 'initialize',
    params: {
      protocolVersion: PROBE_REVISIONS[0],
      capabilities: {},
      clientInfo: { name: 'idempotency-proxy-reconcile', version: '1' },
    },
  });
  if (init.sessionId !== undefined) session['mcp-session-id'] = init.sessionId;
  try {
    const revision = negotiated(init.messages);
    // Every request after initialize names the revision (Streamable HTTP, since 2025-06-18).
    session['mcp-protocol-version'] = revision;
    await post(upstreams, route, path, session, {
      jsonrpc: '2.0',
      method: 'notifications/initialized',
    });
    const call = await post(upstreams, route, path, session, {
      jsonrpc: '2.0',
      id: 2,
      method: 'tools/call',
      params: { name: probe.name, arguments: args },
    });
    return verdictOfCall(reconcile, call);
  } finally {
    // Not waited for: what the probe found stands whatever the DELETE meets, and a slow one must
    // not push the probe past its deadline (the DELETE has the upstream's timeout of its own).
    if (init.sessionId !== undefined) void endSession(upstreams, route, path, session);
  }
}

/** The revision the server answered initialize with; throws when there is none the probe speaks. */
function negotiated(messages: unknown[]): string {
  const answer = messages.find(
    (item): item is { result?: { protocolVersion?: unknown }; error?: unknown } =>
      typeof item === 'object' && item !== null && (item as { id?: unknown }).id === 1,
  );
  const revision = answer?.result?.protocolVersion;
  if (typeof revision !== 'string')
    throw new Error(
      `the MCP server answered the probe's initialize without a protocolVersion${answer?.error === undefined ? '' : `: ${JSON.stringify(answer.error).slice(0, 200)}`}`,
    );
  if (!(PROBE_REVISIONS as readonly string[]).includes(revision))
    throw new Error(
      `the MCP server answered initialize with protocol revision ${revision}, which the probe does not speak (${PROBE_REVISIONS.join(', ')})`,
    );
  return revision;
}

/**
 * Ends the probe's session, so a probe never leaves one open on the server. A server that does not
 * let clients end sessions answers 405; that, or a failed DELETE, changes nothing the probe found.
 */
async function endSession(
  upstreams: UpstreamPools,
  route: RouteConfig,
  path: string,
  session: Record<string, string>,
): Promise<void> {
  await upstreams
    .send(
      route.upstream,
      { method: 'DELETE', path, headers: session, body: Buffer.alloc(0) },
      { head: () => undefined, data: () => undefined },
    )
    .catch(() => undefined);
}

function verdictOfCall(reconcile: ReconcilePolicy, call: Posted): ProbeVerdict {
  const answer = call.messages.find(
    (item): item is Record<string, unknown> =>
      typeof item === 'object' && item !== null && (item as { id?: unknown }).id === 2,
  );
  if (answer === undefined)
    return {
      kind: 'inconclusive',
      reason: `the probe tool call got HTTP ${call.status} and no result`,
    };
  if (answer.error !== undefined)
    return {
      kind: 'inconclusive',
      reason: `the probe tool call failed: ${JSON.stringify(answer.error).slice(0, 200)}`,
    };
  const result = answer.result as Record<string, unknown> | undefined;
  if (typeof result !== 'object' || result === null)
    return { kind: 'inconclusive', reason: 'the probe tool call answered without a result' };
  if (result.isError === true) return { kind: 'not-found' };
  if (
    reconcile.exists !== null &&
    valueAtPointer(result.structuredContent, reconcile.exists) === undefined
  )
    return { kind: 'not-found' };
  const stored =
    reconcile.answerBody === null ? result : valueAtPointer(result, reconcile.answerBody);
  if (stored === undefined)
    return { kind: 'inconclusive', reason: "the probe's result has no answer.body" };
  return {
    kind: 'found',
    response: {
      status: 200,
      headers: [...JSON_HEADERS, ['idempotency-outcome', RECONCILED]],
      body: storedMessage('result', JSON.stringify(stored)),
      bodyOmitted: false,
      outcomeUnknown: false,
    },
  };
}

/**
 * The probe's arguments: `{key}` and `{arguments:/pointer}` filled into every string; a string that
 * is one `{arguments:/pointer}` and nothing else takes the value as it is (a number stays a number).
 */
export function fillArguments(value: unknown, key: string, original: unknown): unknown {
  if (typeof value === 'string') {
    const parts = parseTemplate(value, 'arguments');
    if (typeof parts === 'string') throw new TemplateUnfilled(parts);
    const only = parts.length === 1 ? parts[0] : undefined;
    if (only?.kind === 'value') return valueFor(only, original, 'arguments');
    return fillTemplate(parts, key, original, 'arguments');
  }
  if (Array.isArray(value)) return value.map((item) => fillArguments(item, key, original));
  if (typeof value === 'object' && value !== null)
    return Object.fromEntries(
      Object.entries(value).map(([name, item]) => [name, fillArguments(item, key, original)]),
    );
  return value;
}

/** Where the route's MCP server listens: its literal match.path, less stripPrefix (config checks it). */
export function mcpPath(route: RouteConfig): string {
  const path = route.match.path;
  const stripped =
    route.stripPrefix !== null && path.startsWith(route.stripPrefix)
      ? path.slice(route.stripPrefix.length) || '/'
      : path;
  return `${route.upstream.basePath}${stripped}`;
}

interface Posted {
  readonly status: number;
  readonly sessionId: string | undefined;
  readonly messages: unknown[];
}

async function post(
  upstreams: UpstreamPools,
  route: RouteConfig,
  path: string,
  session: Record<string, string>,
  message: Record<string, unknown>,
): Promise<Posted> {
  let status = 0;
  let sessionId: string | undefined;
  let contentType = '';
  const chunks: Buffer[] = [];
  let bytes = 0;
  await upstreams.send(
    route.upstream,
    {
      method: 'POST',
      path,
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        ...session,
      },
      body: Buffer.from(JSON.stringify(message)),
    },
    {
      head(answered, headers) {
        status = answered;
        const id = headers['mcp-session-id'];
        sessionId = Array.isArray(id) ? id[0] : id;
        const type = headers['content-type'];
        contentType = (Array.isArray(type) ? type[0] : type) ?? '';
      },
      data(chunk) {
        bytes += chunk.length;
        if (bytes <= MAX_ANSWER_BYTES) chunks.push(chunk);
        return undefined;
      },
    },
  );
  if (bytes > MAX_ANSWER_BYTES)
    throw new Error(`the probe answered more than ${MAX_ANSWER_BYTES} bytes`);
  if (status >= 400)
    throw new Error(
      `the MCP server answered the probe's ${String(message.method)} with HTTP ${status}`,
    );
  const text = Buffer.concat(chunks).toString('utf8');
  return {
    status,
    sessionId,
    messages: contentType.includes('text/event-stream') ? eventData(text) : jsonOf(text),
  };
}

function jsonOf(text: string): unknown[] {
  const value = parseDocument(Buffer.from(text));
  if (value === undefined) return [];
  return Array.isArray(value) ? value : [value];
}

/** The JSON messages of an event stream's `data:` fields. */
function eventData(text: string): unknown[] {
  return text
    .split(/\r?\n\r?\n/)
    .map((event) =>
      event
        .split(/\r?\n/)
        .filter((line) => line.startsWith('data:'))
        .map((line) => line.slice(5).trimStart())
        .join('\n'),
    )
    .filter((data) => data !== '')
    .flatMap((data) => jsonOf(data));
}
