// The protected tool calls this process is forwarding, by route scope, tenant, MCP session and
// JSON-RPC id. An SDK client that times out sends notifications/cancelled for its request, and a
// server that obeys it never answers: the call would become an unknown outcome although the tool
// may well have run. Once a call is claimed its result belongs to every retry
// (docs/README.md#small-rules: a client that hangs up does not cancel the upstream call), so the
// proxy takes such a cancel itself and lets the call finish.
//
// A JSON-RPC id is only unique within one client's session, and stateless clients all share the
// session '' and count ids from 1: the scope and tenant keep one caller's cancel of its own id 5
// from being held because another tenant (or route) has an id 5 running.
import type { IncomingHttpHeaders } from 'node:http';
import type { IdempotencyPolicy } from '../config/types';
import { tenantHash } from '../idempotency/tenant';

/** Where a call runs: the record's scope and tenant, and the client's session. */
export interface CallPlace {
  readonly scope: string;
  readonly tenant: string;
  readonly session: string;
}

export class InFlightToolCalls {
  private readonly calls = new Map<string, number>();

  add(place: CallPlace, idText: string): void {
    const key = entry(place, idText);
    this.calls.set(key, (this.calls.get(key) ?? 0) + 1);
  }

  delete(place: CallPlace, idText: string): void {
    const key = entry(place, idText);
    const count = this.calls.get(key) ?? 0;
    if (count <= 1) this.calls.delete(key);
    else this.calls.set(key, count - 1);
  }

  has(place: CallPlace, idText: string): boolean {
    return this.calls.has(entry(place, idText));
  }
}

/** Neither a scope, a hex tenant hash nor a header value can hold a NUL: the parts never blur. */
function entry(place: CallPlace, idText: string): string {
  return `${place.scope}\u0000${place.tenant}\u0000${place.session}\u0000${idText}`;
}

/** The place of a request on an MCP route (the tenant as its record's: tenant.ts). */
export function callPlaceOf(
  policy: Pick<IdempotencyPolicy, 'scope' | 'tenant'>,
  headers: IncomingHttpHeaders,
): CallPlace {
  return {
    scope: policy.scope,
    tenant: tenantHash(headers, policy.tenant),
    session: sessionOf(headers),
  };
}

/** The session a request belongs to ('' when stateless). */
export function sessionOf(headers: IncomingHttpHeaders): string {
  const session = headers['mcp-session-id'];
  return typeof session === 'string' ? session : '';
}
