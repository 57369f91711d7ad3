// Traces: the port the request path calls. The switch that turns it on is tracing-switch.ts; the
// SDK behind it otel-tracing.ts. Off, nothing of OpenTelemetry is loaded and a request carries no
// trace: every hook on the path is `request.trace?.…`, one property check.
//
//   POST /refunds (server)  idempotency.route, .outcome, .replayed, .key_derived, .cached, …
//   ├─ idempotency.claim     one per store round trip (claim, take over, settle unknown, wait)
//   ├─ upstream (client)     its context is the traceparent the upstream receives
//   └─ idempotency.complete  (or .release)
//
// Never an attribute: the key, the tenant, a body, a header's value.
import type { IncomingMessage } from 'node:http';
import type { RouteConfig, UpstreamConfig } from '../config/types';
import type { RequestLogEntry } from '../http/request-log';

export interface Tracing {
  /** The server span of one request, continuing the client's traceparent when it sent one. */
  startRequest(req: IncomingMessage, method: string, route: RouteConfig | undefined): RequestTrace;
  /** Exports the spans ended so far. */
  flush(): Promise<void>;
  /** Exports what is left and stops. */
  shutdown(): Promise<void>;
}

export interface RequestTrace {
  /** A child span around one store round trip ('claim', 'complete', 'release', 'take over', …). */
  store(operation: string): StoreSpan;
  /**
   * A client span around the upstream call; its context is written with `setHeader` as the
   * traceparent (and tracestate) the upstream receives, in place of the client's.
   */
  upstream(
    upstream: UpstreamConfig,
    method: string,
    setHeader: (name: string, value: string) => void,
  ): UpstreamSpan;
  /** Ends the request's span with what its log entry says (outcome, flags, status). */
  end(entry: RequestLogEntry): void;
}

export interface StoreSpan {
  end(error?: unknown): void;
}

export interface UpstreamSpan {
  /** `status` 0: no answer came (a transport error). */
  end(status: number, error?: unknown): void;
}

/** The request headers a traced request's upstream span replaces (W3C Trace Context). */
export const TRACE_HEADERS: ReadonlySet<string> = new Set(['traceparent', 'tracestate']);
