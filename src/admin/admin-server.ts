// The admin listener (docs/admin-and-console.md), on its own port: health, readiness, Prometheus metrics,
// and key inspection/clearing behind a bearer token; the console's page (/ui, console-page.ts) and
// its JSON API (/api, admin-api.ts) behind the same token. No token configured → /keys, /api and
// /ui are off (404), never open.
import http from 'node:http';
import { clearByAdmin } from './clear-record';
import type { Pool } from 'pg';
import { detectTopology, type Topology } from '../db/topology';
import { quoteTableName } from '../db/identifier';
import { LATEST_VERSION } from '../db/migrate';
import { findRecord } from '../store/postgres/record-queries';
import type { RecordId } from '../store/record';
import { authorized, decodeSegment as decode, json, problem, tenantOf } from './admin-http';
import { handleApi } from './admin-api';
import type { AdminDeps } from './admin-deps';
import { sendConsolePage } from './console-page';
import { createListener, type Listener } from '../listener';
import { routeOfScope } from '../idempotency/scope';
import { within } from '../timeout';

const READINESS_TIMEOUT_MS = 2_000;

export function createAdminServer(deps: AdminDeps): Listener {
  return createListener(deps.config().admin.tls, {}, (req, res) => {
    handle(deps, req, res).catch((error: unknown) => {
      json(res, 500, { status: 'error', detail: String(error) });
    });
  });
}

async function handle(
  deps: AdminDeps,
  req: http.IncomingMessage,
  res: http.ServerResponse,
): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://admin');
  const method = req.method ?? 'GET';
  if (url.pathname === '/healthz' && method === 'GET') return json(res, 200, { status: 'ok' });
  if (url.pathname === '/readyz' && method === 'GET') return readiness(deps, res);
  if (url.pathname === '/metrics' && method === 'GET') {
    deps.beforeScrape?.();
    const text = await deps.metrics.registry.metrics();
    res.writeHead(200, { 'content-type': deps.metrics.registry.contentType });
    res.end(text);
    return;
  }
  if ((url.pathname === '/ui' || url.pathname === '/ui/') && method === 'GET') {
    return sendConsolePage(res, deps.config().admin.token !== undefined);
  }
  if (url.pathname === '/api' || url.pathname.startsWith('/api/')) {
    return handleApi(deps, req, res, method, url);
  }
  const keyPath = /^\/keys\/([^/]+)\/([^/]+)$/.exec(url.pathname);
  if (keyPath && (method === 'GET' || method === 'DELETE')) {
    return keys(deps, req, res, method, url, decode(keyPath[1]!), decode(keyPath[2]!));
  }
  problem(
    res,
    404,
    'Not found',
    `No admin endpoint ${method} ${url.pathname}. Try /healthz, /readyz, /metrics, /keys/{route}/{key}, /api/records or /ui.`,
  );
}

async function readiness(deps: AdminDeps, res: http.ServerResponse): Promise<void> {
  const config = deps.config();
  const checks: Record<string, string> = {};
  if (deps.draining()) checks.draining = 'shutting down: not accepting new work';
  let topology: Topology | undefined;
  try {
    const { version, readOnly } = await withTimeout(
      schemaVersion(deps.pool, config.store.table),
      READINESS_TIMEOUT_MS,
    );
    if (version < LATEST_VERSION)
      checks.migrations = `schema version ${version}, this build needs ${LATEST_VERSION}: run idempotency-proxy migrate`;
    // A demoted primary or a standby still answers reads: every claim would fail with 25006.
    if (readOnly)
      checks.store =
        'PostgreSQL is read-only (a standby, or a primary after failover): claims cannot be written';
    topology = await withTimeout(
      detectTopology(deps.pool, config.store.table),
      READINESS_TIMEOUT_MS,
    );
  } catch (error) {
    checks.store = `PostgreSQL not reachable: ${(error as Error).message}`;
  }
  const embedded = deps.embedded?.();
  if (embedded && embedded.state !== 'running')
    checks.embeddedPostgres = `the embedded PostgreSQL is ${embedded.state}${embedded.lastExit ? ` (it exited: ${embedded.lastExit})` : ''}`;
  const workers = deps.workers?.();
  // One worker serving serves every client (more slowly): only none serving is "not ready".
  if (workers && workers.serving === 0)
    checks.workers = `no worker is serving (0 of ${workers.configured}): they are being replaced`;
  const ready = Object.keys(checks).length === 0;
  // Shown, not checked: a cache that is off costs round trips, not correctness, and behind a
  // transaction pooler it is off for good; taking the instance out of rotation would not help.
  const replayCache = deps.replayCache?.();
  // Where the table lives (docs/store-topologies.md), for whoever checks a rollout onto Citus or a new
  // primary.
  json(res, ready ? 200 : 503, {
    status: ready ? 'ready' : 'not ready',
    ...(topology ? { store: topology } : {}),
    ...(embedded ? { embeddedPostgres: embedded } : {}),
    ...(replayCache ? { replayCache } : {}),
    ...(workers ? { workers } : {}),
    ...(ready ? {} : { checks }),
  });
}

async function schemaVersion(
  pool: Pool,
  table: string,
): Promise<{ version: number; readOnly: boolean }> {
  const { rows } = await pool.query<{ version: number | null; read_only: boolean }>(
    `SELECT max(version) AS version, current_setting('transaction_read_only') = 'on' AS read_only FROM ${quoteTableName(`${table}_migrations`)}`,
  );
  return { version: rows[0]?.version ?? 0, readOnly: rows[0]?.read_only === true };
}

async function keys(
  deps: AdminDeps,
  req: http.IncomingMessage,
  res: http.ServerResponse,
  method: string,
  url: URL,
  scope: string,
  key: string,
): Promise<void> {
  const config = deps.config();
  if (
    !authorized(req, res, config.admin.token, {
      title: 'Key inspection is off',
      endpoints: '/keys',
    })
  )
    return;
  const route = routeOfScope(config.routes, scope);
  if (!route?.idempotency) {
    return problem(res, 404, 'Unknown route', `No protected route or group is named "${scope}".`);
  }
  const tenantValues = url.searchParams.getAll('tenant');
  const tenantParts = route.idempotency.tenant;
  if (tenantValues.length !== 0 && tenantValues.length !== tenantParts.length) {
    return problem(
      res,
      400,
      'Wrong tenant',
      `Route "${route.name}" is scoped by ${tenantParts.length} tenant part(s) (${tenantParts.join(', ') || 'none'}); pass one ?tenant= per part, in that order.`,
    );
  }
  const id: RecordId = { scope, tenant: tenantOf(tenantParts, tenantValues), key };
  const table = config.store.table;
  if (method === 'DELETE') {
    const { deleted, workers } = await clearByAdmin(deps, config, id);
    if (!deleted)
      return problem(res, 404, 'No such key', 'Nothing is stored for this route, tenant and key.');
    return json(res, 200, { deleted: true, scope, key, ...(workers ? { workers } : {}) });
  }
  const record = await findRecord(deps.pool, table, id, url.searchParams.get('body') === '1');
  if (!record)
    return problem(res, 404, 'No such key', 'Nothing is stored for this route, tenant and key.');
  json(res, 200, record);
}

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  return within(promise, ms, () => {
    throw new Error(`no answer within ${ms} ms`);
  });
}
