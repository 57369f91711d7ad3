// The switch that turns tracing on: off unless the standard OpenTelemetry variables name an OTLP
// endpoint; then the SDK (otel-tracing.ts) is loaded and each request gets a span tree (tracing.ts).
// Kept apart from the port so the port imports no implementation of itself.
import type { Logger } from 'pino';
import { installSpanSubscribers, type Tracing } from './tracing';

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
  installSpanSubscribers();
  return new OtelTracing({ url, serviceName, logger });
}
