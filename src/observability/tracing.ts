// Traces: the port, and how spans reach the store calls and the upstream calls without the request
// being carried there. The protected path publishes each store call and each upstream call on a
// node:diagnostics_channel (storeCalls, upstreamCalls); the subscribers that turn them into spans
// are installed once, when tracing is on (installSpanSubscribers), and find the request's trace in
// the async context the app runs it in (runTraced). Off, nothing subscribes, a publish is one
// `hasSubscribers` check, and nothing of OpenTelemetry is loaded. The switch is tracing-switch.ts;
// the SDK behind the port otel-tracing.ts.
//
//   POST /refunds (server)  idempotency.route, .outcome, .replayed, .key_derived, .cached, …
//   ├─ idempotency.claim     one per store round trip (claim, take over, settle unknown, wait)
//   ├─ upstream (client)     its context is the traceparent the upstream receives
//   └─ idempotency.complete  (or .release)
//
// Never an attribute: the key, the tenant, a body, a header's value.
import { AsyncLocalStorage } from 'node:async_hooks';
import diagnostics from 'node:diagnostics_channel';
import type { IncomingMessage, OutgoingHttpHeaders } from 'node:http';
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

/** The trace of the protected request being served, in its async context (runTraced). */
const requestTraces = new AsyncLocalStorage<RequestTrace>();

/** Runs a request's protected path with its trace as the context its store and upstream spans join. */
export function runTraced<T>(trace: RequestTrace | undefined, run: () => T): T {
  return trace === undefined ? run() : requestTraces.run(trace, run);
}

/** One store round trip as published: `failure` set when it failed. */
export interface StoreCallEvent {
  readonly operation: string;
  failure?: unknown;
  span?: StoreSpan;
}

/**
 * One upstream call of a protected request as published: the subscriber may replace the trace
 * headers in `headers` (what the upstream receives); `status` and `error` are set when it ends.
 */
export interface UpstreamCallEvent {
  readonly upstream: UpstreamConfig;
  readonly method: string;
  readonly headers: OutgoingHttpHeaders;
  status: number;
  error?: unknown;
  span?: UpstreamSpan;
}

/** Store calls of protected requests: `start` before, `end` after (failed or not). */
export const storeCalls = {
  start: diagnostics.channel('idempotency-proxy:store-call:start'),
  end: diagnostics.channel('idempotency-proxy:store-call:end'),
};

/** Upstream calls of protected requests: `start` before the request is sent, `end` after. */
export const upstreamCalls = {
  start: diagnostics.channel('idempotency-proxy:upstream-call:start'),
  end: diagnostics.channel('idempotency-proxy:upstream-call:end'),
};

let installed = false;

/**
 * Turns the published store and upstream calls into child spans of their request's trace. Once per
 * process: the trace comes from the request's own context, whichever Tracing made it.
 */
export function installSpanSubscribers(): void {
  if (installed) return;
  installed = true;
  storeCalls.start.subscribe((message) => {
    const event = message as StoreCallEvent;
    event.span = requestTraces.getStore()?.store(event.operation);
  });
  storeCalls.end.subscribe((message) => {
    const event = message as StoreCallEvent;
    event.span?.end(event.failure);
  });
  upstreamCalls.start.subscribe((message) => {
    const event = message as UpstreamCallEvent;
    const trace = requestTraces.getStore();
    if (trace === undefined) return;
    // Its context replaces the client's traceparent; untraced, the client's go up as they came.
    const headers = event.headers;
    for (const name of TRACE_HEADERS) delete headers[name];
    event.span = trace.upstream(event.upstream, event.method, (name, value) => {
      headers[name] = value;
    });
  });
  upstreamCalls.end.subscribe((message) => {
    const event = message as UpstreamCallEvent;
    if (event.error === undefined) event.span?.end(event.status);
    else event.span?.end(event.status, event.error);
  });
}
