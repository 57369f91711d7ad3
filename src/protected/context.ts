// What a protected request is handled with: its dependencies, the request itself, and the headers
// the proxy adds. Shared by the state machine's modules (decide.ts and its helpers).
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { IdempotencyPolicy, RouteConfig } from '../config/types';
import type { RequestLogEntry } from '../http/request-log';
import { type RequestTarget } from '../http/router';
import type { PassThrough } from '../upstream/passthrough';
import type { UpstreamPools } from '../upstream/protected';
import type { CachingKeyStore } from '../store/caching-key-store';
import type { CompletionWaiter } from '../store/record';
import type { LocalKeys } from './local-keys';
import type { McpCall } from '../mcp/tool-call';
import type { InFlightToolCalls } from '../mcp/in-flight-calls';
import type { RequestTrace } from '../observability/tracing';

export interface ProtectedDeps {
  /** The store with its replay cache and the counters of requests answered from memory. */
  readonly store: CachingKeyStore;
  readonly upstreams: UpstreamPools;
  readonly passThrough: PassThrough;
  readonly onStoreError: (error: unknown, operation: string) => void;
  /** Wakes onConcurrent: wait requests; without one they poll. */
  readonly waiter?: CompletionWaiter;
  /** Metrics hooks (observability/metrics.ts); the state machine itself knows no metrics library. */
  readonly observer?: ProtectedObserver;
  /** Repeats of keys this process is working on, answered without the store (local-keys.ts). */
  readonly localKeys?: LocalKeys;
  /** MCP tool calls this process is forwarding, so a client's cancel does not stop them. */
  readonly toolCalls?: InFlightToolCalls;
}

export interface ProtectedObserver {
  /** One store round trip (or a wait, operation 'wait'), with its error if it failed. */
  storeCall(operation: string, ms: number, error: unknown): void;
  /** +1 when this instance starts forwarding under a claim, -1 when it has stored or released it. */
  claimsHeld(delta: 1 | -1): void;
}

export interface ProtectedRequest {
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  readonly route: RouteConfig;
  readonly policy: IdempotencyPolicy;
  readonly target: RequestTarget;
  readonly log: RequestLogEntry;
  /** Set for a tools/call on an MCP route: the proxy's answers are JSON-RPC (mcp/jsonrpc.ts). */
  readonly mcp?: McpCall;
  /** The request's spans when tracing is on (observability/tracing.ts); undefined when off. */
  readonly trace?: RequestTrace;
}

export const OUTCOME_HEADER = 'idempotency-outcome';
export const BODY_OMITTED_HEADER = 'idempotent-body-omitted';
