// When tracing is on and where spans go (observability/tracing.ts): the standard OpenTelemetry
// variables, off by default.
import { tracesEndpoint } from '../../src/observability/tracing-switch';

describe('tracesEndpoint', () => {
  test.each([
    ['nothing set: off', {}, undefined],
    ['an empty endpoint: off', { OTEL_EXPORTER_OTLP_ENDPOINT: ' ' }, undefined],
    [
      'the base endpoint gets /v1/traces',
      { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' },
      'http://collector:4318/v1/traces',
    ],
    [
      'a base endpoint with a path and a slash',
      { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/otlp/' },
      'http://collector:4318/otlp/v1/traces',
    ],
    [
      'the traces endpoint is used as given and wins',
      {
        OTEL_EXPORTER_OTLP_ENDPOINT: 'http://a:4318',
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://b:4318/custom',
      },
      'http://b:4318/custom',
    ],
    [
      'OTEL_SDK_DISABLED=true turns it off',
      { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://a:4318', OTEL_SDK_DISABLED: 'TRUE' },
      undefined,
    ],
    [
      'OTEL_SDK_DISABLED=false leaves it on',
      { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://a:4318', OTEL_SDK_DISABLED: 'false' },
      'http://a:4318/v1/traces',
    ],
    [
      'OTEL_TRACES_EXPORTER=none turns it off',
      { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://a:4318', OTEL_TRACES_EXPORTER: 'none' },
      undefined,
    ],
  ])('%s', (_what, env: NodeJS.ProcessEnv, expected) => {
    expect(tracesEndpoint(env)).toBe(expected);
  });
});
