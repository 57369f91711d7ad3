// The JSON-RPC base that MCP and A2A share (JSON-RPC 2.0): the codes, the error object, and how a
// message is stored without its `id` (STORED_PREFIX + the rest of the message), because each retry
// carries an id of its own: a replay splices the retry's id in front of the rest (withId).
import type { HeaderPairs } from '../store/record';

/** Every JSON-RPC message the proxy stores begins with these bytes (ids come after). */
export const STORED_PREFIX = '{"jsonrpc":"2.0",';
export const STORED_PREFIX_BYTES = Buffer.from(STORED_PREFIX);

export const JSON_HEADERS: HeaderPairs = [['content-type', 'application/json']];

/** JSON-RPC's own code for a request the receiver will not take (JSON-RPC 2.0 §5.1). */
export const INVALID_REQUEST = -32600;
/** JSON-RPC's code for a message that cannot be read as JSON (JSON-RPC 2.0 §5.1). */
export const PARSE_ERROR = -32700;
/**
 * The code the MCP SDK's server gives a request its HTTP transport refuses (413, 415, ...); the
 * body reader (read-body.ts) uses it for every protocol on this base.
 */
export const TRANSPORT_ERROR = -32000;

export interface JsonRpcErrorObject {
  readonly code: number;
  readonly message: string;
  readonly data: Record<string, unknown>;
}

/** A whole JSON-RPC error response; `idText` is the request's id as JSON text ('null' if unknown). */
export function errorMessage(idText: string, error: JsonRpcErrorObject): string {
  return `${STORED_PREFIX}"id":${idText},"error":${JSON.stringify(error)}}`;
}

/** A tool's final response as stored: the message without its id, as JSON. */
export function storedMessage(member: 'result' | 'error', valueJson: string): Buffer {
  return Buffer.from(`${STORED_PREFIX}"${member}":${valueJson}}`);
}

/**
 * A stored message under the retry's id. A record that is not one of ours (a `group` shared with a
 * REST route) is returned as it was stored.
 */
export function withId(stored: Buffer, idText: string): Buffer {
  if (!stored.subarray(0, STORED_PREFIX_BYTES.length).equals(STORED_PREFIX_BYTES)) return stored;
  const id = Buffer.from(`"id":${idText},`);
  return Buffer.concat([STORED_PREFIX_BYTES, id, stored.subarray(STORED_PREFIX_BYTES.length)]);
}
