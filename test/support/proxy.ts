// Starts the real proxy (composeProxy, wired as serve wires it) on port 0 against the suite's PostgreSQL,
// with its own table so test files never see each other's keys.
import { randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import type { Pool } from 'pg';
import pino from 'pino';
import { parseDocument } from 'yaml';
import type { App } from '../../src/app';
import { composeProxy } from '../../src/compose';
import { parseConfigText } from '../../src/compiler/load';
import type { ProxyConfig } from '../../src/config/types';
import type { CompletionListener } from '../../src/store/postgres/completion-listener';
import { ProxyMetrics } from '../../src/metrics';
import { migrate } from '../../src/db/migrate';
import { createPool } from '../../src/db/pool';
import type { ReplayCache } from '../../src/store/replay-cache';
import type { PostgresKeyStore } from '../../src/store/postgres/key-store';

export interface TestProxy {
  readonly url: string;
  readonly port: number;
  readonly app: App;
  readonly pool: Pool;
  readonly config: ProxyConfig;
  readonly table: string;
  readonly logs: Record<string, unknown>[];
  readonly listener: CompletionListener;
  readonly metrics: ProxyMetrics;
  readonly cache: ReplayCache | undefined;
  /** The PostgreSQL key store behind the request path (its pending writes, for fault tests). */
  readonly store: PostgresKeyStore;
  /** Adds replay-cache hits to the records now (production does it every second). */
  flushCounters(): Promise<void>;
  /** The admin listener (health, readiness, metrics, keys) on its own port. */
  readonly adminUrl: string;
  close(): Promise<void>;
}

export function uniqueTable(prefix = 'keys'): string {
  return `t_${prefix}_${randomBytes(5).toString('hex')}`.slice(0, 50);
}

export function databaseUrl(): string {
  const url = process.env.DATABASE_URL;
  if (!url) throw new Error('DATABASE_URL is not set: the jest global setup should have set it');
  return url;
}

export interface StartProxyOptions {
  /** YAML config; `store.table` is set to a fresh table unless the YAML names one. */
  readonly yaml: string;
  readonly table?: string;
  /**
   * For config interpolation, and where the OpenTelemetry variables are read: never process.env,
   * so in-process proxies are untraced (traced ones run as a process: tracing.test.ts).
   */
  readonly env?: NodeJS.ProcessEnv;
  /** Use this pool instead of one on DATABASE_URL (e.g. a database that a test stops). */
  readonly databaseUrl?: string;
  /** The completion listener's URL, when not the pool's (e.g. through a forwarder a test freezes). */
  readonly listenerDatabaseUrl?: string;
}

/**
 * The YAML with `store.table: ${TEST_TABLE}` when it names no table: without it every such proxy
 * would share the default table, and on a DATABASE_URL that outlives the run (a server of one's
 * own, a Citus cluster) a second run would replay the first run's answers. YAML that names one is
 * left as it is, byte for byte.
 */
function withTable(yaml: string): string {
  const document = parseDocument(yaml);
  if (document.hasIn(['store', 'table'])) return yaml;
  document.setIn(['store', 'table'], '${TEST_TABLE}');
  return document.toString();
}

export async function startProxy(options: StartProxyOptions): Promise<TestProxy> {
  const table = options.table ?? uniqueTable();
  const url = options.databaseUrl ?? databaseUrl();
  const config = parseConfigText(withTable(options.yaml), 'test.yaml', {
    ...options.env,
    DATABASE_URL: url,
    TEST_TABLE: table,
  });
  const pool = createPool({
    url,
    tls: config.store.tls,
    size: 10,
    onError: () => undefined,
    synchronousCommit: config.store.synchronousCommit,
  });
  await migrate(pool, config.store.table);
  const logs: Record<string, unknown>[] = [];
  const logger = pino(
    { level: 'info', base: undefined },
    { write: (line: string) => logs.push(JSON.parse(line) as Record<string, unknown>) },
  );
  // The wiring serve runs (src/compose.ts); only the pool, the log and the ports are the test's.
  const instance = await composeProxy({
    config,
    pool,
    databaseUrl: options.listenerDatabaseUrl ?? url,
    logger,
    metrics: new ProxyMetrics({ defaultMetrics: false }),
    env: options.env ?? {},
  });
  const { app, admin, listener, metrics } = instance;
  await new Promise<void>((resolve) => app.server.listen(0, '127.0.0.1', resolve));
  await new Promise<void>((resolve) => admin.listen(0, '127.0.0.1', resolve));
  const port = (app.server.address() as AddressInfo).port;
  const adminPort = (admin.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    app,
    pool,
    config,
    table: config.store.table,
    logs,
    listener,
    metrics,
    cache: instance.cache,
    store: instance.store,
    flushCounters: () => instance.flushCounters(),
    adminUrl: `http://127.0.0.1:${adminPort}`,
    async close() {
      await instance.close(1_000);
      await pool.end();
    },
  };
}

/**
 * Starts (beforeAll) an upstream and a proxy whose config is `yaml(upstream)`, and stops both
 * (afterAll), for the enclosing describe block or file; read them through the getters once tests run.
 */
export function proxyInFrontOf<U extends { readonly url: string; close(): Promise<void> }>(
  start: () => Promise<U>,
  yaml: (upstream: U) => string,
): { readonly upstream: U; readonly proxy: TestProxy } {
  let upstream: U | undefined;
  let proxy: TestProxy | undefined;
  beforeAll(async () => {
    upstream = await start();
    proxy = await startProxy({ yaml: yaml(upstream) });
  });
  afterAll(async () => {
    await proxy?.close();
    await upstream?.close();
  });
  const started = <T>(value: T | undefined): T => {
    if (value === undefined) throw new Error('the proxy is started in beforeAll');
    return value;
  };
  return {
    get upstream() {
      return started(upstream);
    },
    get proxy() {
      return started(proxy);
    },
  };
}
