// Reading a POST on an MCP route (src/mcp/README.md): is it a tools/call the route protects, and if so which
// tool, under which JSON-RPC id, with which key and fingerprint. Only a message the body reader
// (../jsonrpc/read-body.ts) could read comes here; every other body was refused before anything
// asked what it is.
//
//   message ─┬─ batch (array) ─┬─ with a protected call ► refused (-32600)
//            │                 └─ without ──────────────► pass
//            ├─ tools/call of a protected tool ─────────► call: key = header
//            │                                                    | key.body's pointer
//            │                                                    | params.idempotencyKey
//            │                                                    | derived from tool + arguments
//            ├─ notifications/cancelled ───────────────► cancel (held back while the call runs here)
//            └─ anything else (initialize, tools/list, notifications, responses) ► pass
//
// The key never comes from the JSON-RPC id, `_meta` or the session: a retry changes all three.
import type { KeyPolicy, McpPolicy } from '../config/types';
import { keyInBody } from '../idempotency/body-key';
import {
  arrayElements,
  canonicalizeAt,
  hasValueAt,
  type ParsedJson,
  stringAt,
} from '../idempotency/canonical-json';
import { DERIVED_KEY_PREFIX } from '../idempotency/derived-key';
import { FramedHash } from '../idempotency/fingerprint';
import { type KeyParseResult, parseIdempotencyKey } from '../idempotency/key';

/** A protected tools/call, as the answers need it. */
export interface McpCall {
  /** The request's JSON-RPC id as JSON text (`7`, `"abc"`), to answer under. */
  readonly idText: string;
  readonly tool: string;
}

export type McpMessage =
  | { readonly kind: 'pass' }
  | { readonly kind: 'batch-with-call'; readonly tool: string }
  | { readonly kind: 'notification-call'; readonly tool: string }
  | { readonly kind: 'cancel'; readonly requestIdText: string }
  | { readonly kind: 'call'; readonly call: McpCall; readonly parsed: ParsedJson };

const METHOD = ['method'];
const TOOL = ['params', 'name'];
const ARGUMENTS = ['params', 'arguments'];
const KEY_PARAM = ['params', 'idempotencyKey'];
const INPUT_RESPONSES = ['params', 'inputResponses'];
const ID = ['id'];
const CANCELLED_ID = ['params', 'requestId'];

export function readMcpMessage(parsed: ParsedJson, mcp: McpPolicy): McpMessage {
  const batch = arrayElements(parsed);
  if (batch !== undefined) {
    const tool = batch.map((element) => protectedTool(element, mcp)).find((name) => name);
    return tool === undefined ? { kind: 'pass' } : { kind: 'batch-with-call', tool };
  }
  const tool = protectedTool(parsed, mcp);
  if (tool === undefined) {
    const cancelled = stringAt(parsed, METHOD) === 'notifications/cancelled';
    const requestIdText = cancelled ? canonicalizeAt(parsed, CANCELLED_ID) : undefined;
    return requestIdText === undefined ? { kind: 'pass' } : { kind: 'cancel', requestIdText };
  }
  // A call without an id is a notification: nothing would come back to store or replay.
  if (!hasValueAt(parsed, ID)) return { kind: 'notification-call', tool };
  return { kind: 'call', call: { idText: canonicalizeAt(parsed, ID)!, tool }, parsed };
}

function protectedTool(message: ParsedJson, mcp: McpPolicy): string | undefined {
  if (stringAt(message, METHOD) !== 'tools/call') return undefined;
  const tool = stringAt(message, TOOL);
  return tool !== undefined && mcp.protects(tool) ? tool : undefined;
}

/**
 * The call's key: the key header if sent (an invalid one is refused, never replaced), else the one
 * at key.body in the message (UCP's /params/arguments/meta/idempotency-key, ACP's
 * /params/_meta/idempotency_key), else params.idempotencyKey (SEP-3182), else undefined: derive one
 * (or, with key.body and key.required, refuse).
 */
export function sentToolCallKey(
  headerLines: readonly string[] | undefined,
  parsed: ParsedJson,
  key: Pick<KeyPolicy, 'body' | 'bodyPointer' | 'maxLength'>,
  headerName: string,
): KeyParseResult | undefined {
  const { maxLength } = key;
  if (headerLines !== undefined) return parseIdempotencyKey(headerLines, maxLength, headerName);
  const inBody = keyInBody(parsed, key);
  if (inBody !== undefined) return inBody;
  if (!hasValueAt(parsed, KEY_PARAM)) return undefined;
  const value = stringAt(parsed, KEY_PARAM);
  if (value === undefined)
    return {
      ok: false,
      problem: 'invalid',
      detail: 'params.idempotencyKey must be a string; send a unique key, such as a UUID.',
    };
  return parseIdempotencyKey([value], maxLength, 'params.idempotencyKey');
}

/** What a repeat must match: the tool and its canonical arguments, `ignore` left out. */
export function toolCallFingerprint(call: McpCall, parsed: ParsedJson, mcp: McpPolicy): Buffer {
  return toolCallHash('mcp-fingerprint/v1', call, parsed, mcp);
}

/** The key of a call sent without one: same tool and arguments inside the window, same key. */
export function derivedToolCallKey(call: McpCall, parsed: ParsedJson, mcp: McpPolicy): string {
  return (
    DERIVED_KEY_PREFIX + toolCallHash('mcp-derived-key/v1', call, parsed, mcp).toString('base64url')
  );
}

/**
 * Tool, arguments and — for a continuation round of an `input_required` call (2026-07-28) — the
 * user's answers: round 1 is always released, so it needs no key of its own, but a declined and an
 * accepted continuation are different calls, and a stored decline must not answer a later
 * acceptance. `requestState` stays out: a server may mint a new one for each round it asks, and a
 * retry of the same answers must find the same record.
 */
function toolCallHash(domain: string, call: McpCall, parsed: ParsedJson, mcp: McpPolicy): Buffer {
  const ignore = mcp.ignore.map((path) => [...ARGUMENTS, ...path]);
  const args = canonicalizeAt(parsed, ARGUMENTS, ignore);
  const answers = canonicalizeAt(parsed, INPUT_RESPONSES);
  const hash = new FramedHash(domain)
    .field(call.tool)
    .optionalList(args === undefined ? undefined : [args]);
  // Added only when present, so a call without answers hashes as it did before rounds existed.
  if (answers !== undefined) hash.field('inputResponses').field(answers);
  return hash.digest();
}
