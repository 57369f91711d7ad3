// Traces: the port the request path calls, and the switch that turns it on. Off unless the standard
// OpenTelemetry variables name an OTLP endpoint; then the SDK (otel-tracing.ts) is loaded and each
// request gets a span tree. Off, nothing of OpenTelemetry is loaded and a request carries no trace:
// every hook on the path is `request.trace?.…`, one property check.
//
//   POST /refunds (server)  idempotency.route, .outcome, .replayed, .key_derived, .cached, …
//   ├─ idempotency.claim     one per store round trip (claim, take over, settle unknown, wait)
//   ├─ upstream (client)     its context is the traceparent the upstream receives
//   └─ idempotency.complete  (or .release)
//
// Never an attribute: the key, the tenant, a body, a header's value.
import type { IncomingMessage } from 'node:http';
import type { Logger } from 'pino';
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

/** Where spans go, from the standard variables; undefined when tracing is off. */
export function tracesEndpoint(env: NodeJS.ProcessEnv): string | undefined {
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') return undefined;
  if (env.OTEL_TRACES_EXPORTER?.trim().toLowerCase() === 'none') return undefined;
  const traces = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim();
  if (traces) return traces; // used as given (the OpenTelemetry spec: a signal's own URL)
  const base = env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim();
  if (!base) return undefined;
  return `${base.endsWith('/') ? base : `${base}/`}v1/traces`;
}

/**
 * Tracing as the environment asks: undefined (off, the default) without an OTLP endpoint, or with
 * OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none. Only then is the SDK loaded.
 */
export async function startTracing(
  env: NodeJS.ProcessEnv,
  logger: Logger,
): Promise<Tracing | undefined> {
  const url = tracesEndpoint(env);
  if (url === undefined) return undefined;
  const { OtelTracing } = await import('./otel-tracing');
  const serviceName = env.OTEL_SERVICE_NAME?.trim() || 'idempotency-proxy';
  logger.info(
    { endpoint: url, serviceName },
    `tracing: spans are exported to ${url} (OTLP/HTTP, JSON) as service ${serviceName}`,
  );
  return new OtelTracing({ url, serviceName, logger });
}
