// The admin console's JSON API (/api/…, behind the admin bearer token), usable without the page:
//   GET    /api/records?state=&route=&limit=&cursor=   records newest first, one page at a time
//   GET    /api/records/{scope}/{key}?tenant=|tenantHash=   one record and its history
//   DELETE /api/records/{scope}/{key}?tenant=|tenantHash=   clear it: the next request executes
//   GET    /api/counters                               this process's answers per outcome, 10 s buckets
//   GET    /api/scopes                                 the protected scopes and their tenant parts
// Listings give the tenant as its hash, so a record found there is addressed with ?tenantHash=.
import { clearByAdmin } from './clear-record';
import type http from 'node:http';
import type { ProxyConfig } from '../config/types';
import {
  decodeCursor,
  LIST_STATES,
  type ListState,
  listRecords,
} from '../store/postgres/record-listing';
import { findRecord } from '../store/postgres/record-queries';
import type { RecordId } from '../store/record';
import { authorized, decodeSegment, json, problem, tenantOf } from './admin-http';
import { routeOfScope } from '../idempotency/scope';
import type { AdminDeps } from './admin-deps';

export const DEFAULT_LIMIT = 50;
export const MAX_LIMIT = 500;
const LIST_PARAMS = ['state', 'route', 'limit', 'cursor'];
const RECORD_PARAMS = ['tenant', 'tenantHash', 'body'];

export async function handleApi(
  deps: AdminDeps,
  req: http.IncomingMessage,
  res: http.ServerResponse,
  method: string,
  url: URL,
): Promise<void> {
  const config = deps.config();
  const off = { title: 'The admin API is off', endpoints: '/api and the console (/ui)' };
  if (!authorized(req, res, config.admin.token, off)) return;
  const path = url.pathname;
  if (path === '/api/records' && method === 'GET') return list(deps, res, url);
  if (path === '/api/counters' && method === 'GET')
    return json(res, 200, await deps.metrics.recentOutcomes.snapshot());
  if (path === '/api/scopes' && method === 'GET') return json(res, 200, scopes(config));
  const one = /^\/api\/records\/([^/]+)\/([^/]+)$/.exec(path);
  if (one && (method === 'GET' || method === 'DELETE')) {
    return record(deps, res, method, url, decodeSegment(one[1]!), decodeSegment(one[2]!));
  }
  problem(
    res,
    404,
    'Not found',
    `No admin API endpoint ${method} ${path}. Try GET /api/records, GET or DELETE /api/records/{scope}/{key}, GET /api/counters or GET /api/scopes.`,
  );
}

async function list(deps: AdminDeps, res: http.ServerResponse, url: URL): Promise<void> {
  const params = url.searchParams;
  if (!knownParams(res, params, LIST_PARAMS, 'GET /api/records')) return;
  const state = params.get('state') ?? 'all';
  if (!(LIST_STATES as readonly string[]).includes(state))
    return problem(
      res,
      400,
      'Bad state',
      `state must be one of ${LIST_STATES.join(', ')} (unknown = unknown outcomes waiting for an operator, in_flight = claims being forwarded, reconciled = unknown outcomes a probe resolved); got "${state}".`,
    );
  const limitText = params.get('limit') ?? String(DEFAULT_LIMIT);
  const limit = /^\d{1,4}$/.test(limitText) ? Number(limitText) : NaN;
  if (!(limit >= 1 && limit <= MAX_LIMIT))
    return problem(
      res,
      400,
      'Bad limit',
      `limit must be a whole number from 1 to ${MAX_LIMIT} (default ${DEFAULT_LIMIT}); got "${limitText}". Page through more with the cursor.`,
    );
  const cursorText = params.get('cursor');
  const cursor = cursorText === null || cursorText === '' ? undefined : decodeCursor(cursorText);
  if (cursorText && !cursor)
    return problem(
      res,
      400,
      'Bad cursor',
      'The cursor is not one this API handed out. Pass the nextCursor of the previous page unchanged, with the same state and route, or leave cursor out to start from the newest record.',
    );
  const route = params.get('route') ?? undefined;
  const page = await listRecords(deps.pool, deps.config().store.table, {
    state: state as ListState,
    ...(route ? { route } : {}),
    limit,
    ...(cursor ? { cursor } : {}),
  });
  json(res, 200, page);
}

async function record(
  deps: AdminDeps,
  res: http.ServerResponse,
  method: 'GET' | 'DELETE',
  url: URL,
  scope: string,
  key: string,
): Promise<void> {
  const config = deps.config();
  const params = url.searchParams;
  if (!knownParams(res, params, RECORD_PARAMS, '/api/records/{scope}/{key}')) return;
  const tenant = resolveTenant(config, scope, params);
  if ('error' in tenant) return problem(res, 400, 'Bad tenant', tenant.error);
  const id: RecordId = { scope, tenant: tenant.hash, key };
  const table = config.store.table;
  const missing = `Nothing is stored for scope "${scope}", this tenant and key "${key}". A tenanted scope needs ?tenant= (the raw value, one per tenant part) or ?tenantHash= (as listed by /api/records).`;
  if (method === 'DELETE') {
    const { deleted, workers } = await clearByAdmin(deps, config, id);
    if (!deleted) return problem(res, 404, 'No such record', missing);
    return json(res, 200, {
      deleted: true,
      scope,
      tenant: id.tenant,
      key,
      ...(workers ? { workers } : {}),
    });
  }
  const found = await findRecord(deps.pool, table, id, params.get('body') === '1');
  if (!found) return problem(res, 404, 'No such record', missing);
  json(res, 200, found);
}

/** A misspelt parameter is a 400, not silently ignored (a typo in a filter would list everything). */
function knownParams(
  res: http.ServerResponse,
  params: URLSearchParams,
  allowed: readonly string[],
  endpoint: string,
): boolean {
  const unknown = [...params.keys()].find((name) => !allowed.includes(name));
  if (unknown === undefined) return true;
  problem(
    res,
    400,
    'Unknown parameter',
    `${endpoint} takes ${allowed.join(', ')}; "${unknown}" is none of them.`,
  );
  return false;
}

type TenantResult = { hash: string } | { error: string };

/** ?tenantHash= as stored, or ?tenant= raw values hashed as requests are, or no tenant. */
function resolveTenant(config: ProxyConfig, scope: string, params: URLSearchParams): TenantResult {
  const hash = params.get('tenantHash');
  const values = params.getAll('tenant');
  if (hash !== null && values.length > 0)
    return { error: 'Pass either ?tenant= (raw values) or ?tenantHash=, not both.' };
  if (hash !== null) {
    return /^([0-9a-f]{64})?$/.test(hash)
      ? { hash }
      : {
          error: 'tenantHash is the 64 hex digits /api/records lists as "tenant" (empty for none).',
        };
  }
  const route = routeOfScope(config.routes, scope);
  const parts = route?.idempotency?.tenant ?? [];
  if (values.length === 0) return { hash: tenantOf(parts, []) };
  if (!route)
    return {
      error: `No protected route or group is named "${scope}" in the config, so raw tenant values cannot be hashed; pass ?tenantHash= instead.`,
    };
  if (values.length !== parts.length)
    return {
      error: `Scope "${scope}" is tenanted by ${parts.length} part(s) (${parts.join(', ') || 'none'}); pass one ?tenant= per part, in that order.`,
    };
  return { hash: tenantOf(parts, values) };
}

function scopes(config: ProxyConfig) {
  const byScope = new Map<string, { scope: string; routes: string[]; tenant: readonly string[] }>();
  for (const route of config.routes) {
    if (!route.idempotency) continue;
    const entry = byScope.get(route.idempotency.scope) ?? {
      scope: route.idempotency.scope,
      routes: [],
      tenant: route.idempotency.tenant,
    };
    entry.routes.push(route.name);
    byScope.set(entry.scope, entry);
  }
  return { scopes: [...byScope.values()] };
}
