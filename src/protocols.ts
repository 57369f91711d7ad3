// The protocols this proxy speaks, registered where the app is composed: each is one folder that
// exports one adapter object (rest/, mcp/, a2a/; the contract is protected/protocol.ts). The
// pipeline is handed the route's adapter and the reconciler its probe; neither imports a protocol.
// A fourth protocol is one more folder and one more line in protocolAdapters.
import type { RouteConfig, IdempotencyPolicy } from './config/types';
import type { Call, ProtocolAdapter } from './protected/protocol';
import type { ReconcileProbe } from './reconcile/resolution';
import { A2A } from './a2a/adapter';
import { mcpAdapter } from './mcp/adapter';
import { InFlightToolCalls } from './mcp/in-flight-calls';
import { REST } from './rest/adapter';

export type ProtocolAdapters = readonly ProtocolAdapter<Call>[];

/**
 * One app's adapters, most particular first: a route is served by the first that serves its
 * policy, and REST, which serves every protected route, comes last. MCP's keeps the calls this
 * process forwards (a client's cancel of one is held), so each app gets its own.
 */
export function protocolAdapters(): ProtocolAdapters {
  return [mcpAdapter(new InFlightToolCalls()), A2A, REST];
}

/** The adapter that serves a protected route's policy. */
export function adapterOf(
  adapters: ProtocolAdapters,
  policy: IdempotencyPolicy,
): ProtocolAdapter<Call> {
  for (const adapter of adapters) if (adapter.serves(policy)) return adapter;
  return REST;
}

/** The reconciler's lookup: a route's probe is its protocol adapter's. */
export function probeOf(
  adapters: ProtocolAdapters,
): (route: RouteConfig) => ReconcileProbe | undefined {
  return (route) =>
    route.idempotency === null ? undefined : adapterOf(adapters, route.idempotency).probe;
}
