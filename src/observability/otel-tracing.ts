// The Tracing port (tracing.ts) on the OpenTelemetry JS SDK: a BasicTracerProvider whose batch
// processor exports OTLP/HTTP (JSON), the W3C Trace Context propagator for the incoming and the
// forwarded traceparent. Loaded only when tracing is on. No context manager and no global provider:
// each span is given its parent explicitly, so nothing rides on async hooks and nothing else in the
// process is traced by accident.
import {
  type Context,
  diag,
  DiagLogLevel,
  defaultTextMapGetter,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  type TextMapSetter,
  trace,
  type Tracer,
} from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { detectResources, envDetector, resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, BatchSpanProcessor } from '@opentelemetry/sdk-trace-base';
import {
  ATTR_ERROR_TYPE,
  ATTR_HTTP_REQUEST_METHOD,
  ATTR_HTTP_RESPONSE_STATUS_CODE,
  ATTR_HTTP_ROUTE,
  ATTR_SERVER_ADDRESS,
  ATTR_SERVER_PORT,
  ATTR_SERVICE_NAME,
} from '@opentelemetry/semantic-conventions';
import type { IncomingMessage } from 'node:http';
import type { Logger } from 'pino';
import type { RouteConfig, UpstreamConfig } from '../config/types';
import type { RequestLogEntry } from '../http/request-log';
import type { RequestTrace, StoreSpan, Tracing, UpstreamSpan } from './tracing';

export interface OtelTracingOptions {
  /** The OTLP/HTTP traces URL (…/v1/traces). */
  readonly url: string;
  readonly serviceName: string;
  readonly logger: Logger;
}

const propagator = new W3CTraceContextPropagator();

/** Writes injected headers through a callback: a header object and undici's flat list alike. */
const callbackSetter: TextMapSetter<(name: string, value: string) => void> = {
  set: (setHeader, name, value) => setHeader(name, value),
};

/** Store operations as span names ('take over' → idempotency.take_over), made once. */
const storeSpanNames = new Map<string, string>();

/** An upstream's server.address and server.port, read from its origin once. */
const upstreamAddresses = new WeakMap<UpstreamConfig, { host: string; port: number }>();

function addressOf(upstream: UpstreamConfig): { host: string; port: number } {
  let address = upstreamAddresses.get(upstream);
  if (address === undefined) {
    const origin = new URL(upstream.origin);
    const port = Number(origin.port || (origin.protocol === 'https:' ? 443 : 80));
    address = { host: origin.hostname, port };
    upstreamAddresses.set(upstream, address);
  }
  return address;
}

export class OtelTracing implements Tracing {
  private readonly provider: BasicTracerProvider;
  private readonly tracer: Tracer;

  constructor(options: OtelTracingOptions) {
    const { logger } = options;
    // The SDK's own complaints (an unreachable collector, a full queue) as warnings in our log;
    // otherwise a wrong endpoint would lose every span in silence.
    diag.setLogger(
      {
        error: (message) => logger.warn(`tracing: ${message}`),
        warn: (message) => logger.warn(`tracing: ${message}`),
        info: () => undefined,
        debug: () => undefined,
        verbose: () => undefined,
      },
      { logLevel: DiagLogLevel.WARN, suppressOverrideMessage: true },
    );
    // OTEL_SERVICE_NAME wins over a service.name in OTEL_RESOURCE_ATTRIBUTES (the spec's order).
    const resource = resourceFromAttributes({ [ATTR_SERVICE_NAME]: 'idempotency-proxy' })
      .merge(detectResources({ detectors: [envDetector] }))
      .merge(resourceFromAttributes({ [ATTR_SERVICE_NAME]: options.serviceName }));
    // Headers (OTEL_EXPORTER_OTLP_HEADERS), timeout and compression come from the environment;
    // the sampler (OTEL_TRACES_SAMPLER, default parent-based always-on) and the batch sizes
    // (OTEL_BSP_*) too.
    const exporter = new OTLPTraceExporter({ url: options.url });
    this.provider = new BasicTracerProvider({
      resource,
      spanProcessors: [new BatchSpanProcessor(exporter)],
    });
    this.tracer = this.provider.getTracer('idempotency-proxy');
  }

  startRequest(req: IncomingMessage, method: string, route: RouteConfig | undefined): RequestTrace {
    const parent = propagator.extract(ROOT_CONTEXT, req.headers, defaultTextMapGetter);
    // The route's template, never the request's path: ids in a path are not for span names.
    const template = route?.match.path;
    const span = this.tracer.startSpan(
      template === undefined ? method : `${method} ${template}`,
      { kind: SpanKind.SERVER, attributes: { [ATTR_HTTP_REQUEST_METHOD]: method } },
      parent,
    );
    if (route !== undefined) {
      span.setAttribute(ATTR_HTTP_ROUTE, route.match.path);
      span.setAttribute('idempotency.route', route.name);
    }
    return new OtelRequestTrace(this.tracer, span, trace.setSpan(parent, span));
  }

  flush(): Promise<void> {
    return this.provider.forceFlush();
  }

  shutdown(): Promise<void> {
    return this.provider.shutdown();
  }
}

class OtelRequestTrace implements RequestTrace {
  constructor(
    private readonly tracer: Tracer,
    private readonly span: Span,
    private readonly context: Context,
  ) {}

  store(operation: string): StoreSpan {
    let name = storeSpanNames.get(operation);
    if (name === undefined) {
      name = `idempotency.${operation.replace(/ /g, '_')}`;
      storeSpanNames.set(operation, name);
    }
    const span = this.tracer.startSpan(
      name,
      { kind: SpanKind.INTERNAL, attributes: { 'idempotency.operation': operation } },
      this.context,
    );
    return {
      end(error?: unknown) {
        if (error !== undefined) failed(span, errorType(error));
        span.end();
      },
    };
  }

  upstream(
    upstream: UpstreamConfig,
    method: string,
    setHeader: (name: string, value: string) => void,
  ): UpstreamSpan {
    const address = addressOf(upstream);
    const span = this.tracer.startSpan(
      'upstream',
      {
        kind: SpanKind.CLIENT,
        attributes: {
          [ATTR_HTTP_REQUEST_METHOD]: method,
          [ATTR_SERVER_ADDRESS]: address.host,
          [ATTR_SERVER_PORT]: address.port,
          'idempotency.upstream': upstream.name,
        },
      },
      this.context,
    );
    propagator.inject(trace.setSpan(this.context, span), setHeader, callbackSetter);
    return {
      end(status: number, error?: unknown) {
        if (status > 0) span.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, status);
        if (error !== undefined) failed(span, errorType(error));
        else if (status >= 500) failed(span, String(status));
        span.end();
      },
    };
  }

  end(entry: RequestLogEntry): void {
    const span = this.span;
    // From the log entry, field by field: the key, the tenant and bodies are never read here.
    span.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, entry.status);
    span.setAttribute('idempotency.outcome', entry.outcome);
    span.setAttribute('idempotency.replayed', entry.outcome === 'replayed');
    span.setAttribute('idempotency.key_derived', entry.keyDerived === true);
    span.setAttribute('idempotency.cached', entry.cached === true);
    span.setAttribute('idempotency.coalesced', entry.coalesced === true);
    if (entry.outcomeUnknown === true) span.setAttribute('idempotency.outcome_unknown', true);
    if (entry.shadow !== undefined) span.setAttribute('idempotency.shadow', entry.shadow);
    if (entry.attempts !== undefined) span.setAttribute('idempotency.attempts', entry.attempts);
    if (entry.tool !== undefined) span.setAttribute('mcp.tool', entry.tool);
    if (entry.clientClosedEarly === true)
      span.setAttribute('idempotency.client_closed_early', true);
    if (entry.status >= 500) failed(span, String(entry.status));
    span.end();
  }
}

function failed(span: Span, type: string): void {
  span.setAttribute(ATTR_ERROR_TYPE, type);
  span.setStatus({ code: SpanStatusCode.ERROR });
}

/**
 * An error's code (ECONNREFUSED, UND_ERR_HEADERS_TIMEOUT, a SQLSTATE) or class name — never its
 * message, which may quote a value (PostgreSQL's duplicate-key messages quote the row's key).
 */
function errorType(error: unknown): string {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && code !== '') return code;
  return error instanceof Error ? error.name : 'Error';
}
