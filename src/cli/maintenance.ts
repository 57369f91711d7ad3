// `idempotency-proxy prune` and `idempotency-proxy inspect`: one-shot operator commands on the store.
import type { Logger } from 'pino';
import { tenantOf } from '../admin/admin-http';
import type { ProxyConfig } from '../config/types';
import { pruneExpired } from '../store/postgres/pruner';
import { ReconcileStore } from '../store/postgres/reconcile-store';
import { Reconciler } from '../reconcile/reconciler';
import { sweepOnce } from '../reconcile/sweeper';
import { findRecord, findRecordsByKey, type RecordView } from '../store/postgres/record-queries';
import type { CliArgs } from './args';
import { UsageError } from './args';
import { openDatabase } from '../db/open-database';
import { clearRecord } from '../admin/clear-record';
import { routeOfScope } from '../idempotency/scope';
import type { RecordId } from '../store/record';
import { probeOf, protocolAdapters } from '../protocols';

/** `idempotency-proxy reconcile [--route R]`: one sweep of unknown outcomes now (docs/reconcile.md). */
export async function runReconcile(
  config: ProxyConfig,
  args: CliArgs,
  logger: Logger,
): Promise<number> {
  const reconciling = config.routes.filter((route) => route.idempotency?.reconcile);
  if (args.route !== undefined && !reconciling.some((route) => route.name === args.route))
    throw new UsageError(
      `no route named "${args.route}" with idempotency.reconcile; those with one are: ${reconciling.map((r) => r.name).join(', ') || '(none)'}`,
    );
  const database = await openDatabase(config, logger, 'reconcile');
  try {
    const reconciler = new Reconciler(
      new ReconcileStore(database.pool, config.store.table),
      logger,
      undefined,
      probeOf(protocolAdapters()),
    );
    const result = await database.whenReady(() => sweepOnce(reconciler, config, args.route));
    logger.info({ ...result }, `probed ${result.probed} unknown outcome(s)`);
    process.stdout.write(`${JSON.stringify(result)}\n`);
    return 0;
  } finally {
    await database.close();
  }
}

export async function runPrune(config: ProxyConfig, logger: Logger): Promise<number> {
  const database = await openDatabase(config, logger, 'prune');
  try {
    const result = await database.whenReady(() => pruneExpired(database.pool, config.store.table));
    if (result.skipped) logger.info('another instance is pruning right now; nothing done');
    else logger.info({ ...result }, `deleted ${result.deleted} expired record(s)`);
    process.stdout.write(`${JSON.stringify(result)}\n`);
    return 0;
  } finally {
    await database.close();
  }
}

/** The record a route (or group), raw tenant values and a key name; a UsageError for a wrong route. */
function recordIdOf(
  config: ProxyConfig,
  name: string,
  tenants: readonly string[],
  key: string,
): RecordId {
  const route =
    config.routes.find((r) => r.idempotency?.scope === name || r.name === name) ??
    routeOfScope(config.routes, name);
  if (!route?.idempotency) {
    const known = [...new Set(config.routes.flatMap((r) => r.idempotency?.scope ?? []))];
    throw new UsageError(
      `no protected route or group named "${name}"; the protected ones are: ${known.join(', ') || '(none)'}`,
    );
  }
  if (tenants.length !== 0 && tenants.length !== route.idempotency.tenant.length) {
    throw new UsageError(
      `route "${route.name}" is scoped by ${route.idempotency.tenant.length} tenant part(s); pass one --tenant per part, in order`,
    );
  }
  // A route scoped by path (an ACP profile's) is named with it: `checkout /checkout_sessions`.
  const { scope, scopeByPath } = route.idempotency;
  return {
    scope: scopeByPath && name.startsWith(`${scope} /`) ? name : scope,
    tenant: tenantOf(route.idempotency.tenant, tenants),
    key,
  };
}

/**
 * `idempotency-proxy clear ROUTE KEY`: what the admin API's DELETE does, without the admin API
 * (off by default): after an unknown outcome has been checked upstream, the key runs again.
 */
export async function runClear(
  config: ProxyConfig,
  args: CliArgs,
  logger: Logger,
): Promise<number> {
  const id = recordIdOf(config, args.route!, args.tenant, args.key!);
  const database = await openDatabase(config, logger, 'clear');
  try {
    const { deleted } = await database.whenReady(
      () => clearRecord(database.pool, config, id, logger, 'cli'),
      INSPECT_WAIT_MS,
    );
    if (!deleted) {
      process.stderr.write(
        `no record for key ${JSON.stringify(id.key)} on ${id.scope}${id.tenant ? ' for this tenant' : ''}: nothing to clear (a tenanted route needs --tenant, one per part)\n`,
      );
      return 1;
    }
    process.stdout.write(
      `cleared key ${JSON.stringify(id.key)} on ${id.scope}: its next request executes\n`,
    );
    return 0;
  } finally {
    await database.close();
  }
}

/** A person is waiting for inspect's answer: a database that is down is said at once, not after 30 s. */
const INSPECT_WAIT_MS = 0;

export async function runInspect(
  config: ProxyConfig,
  args: CliArgs,
  logger: Logger,
): Promise<number> {
  const key = args.key!;
  const database = await openDatabase(config, logger, 'inspect');
  try {
    let records: RecordView[];
    if (args.route !== undefined) {
      const { scope, tenant } = recordIdOf(config, args.route, args.tenant, key);
      const found = await database.whenReady(
        () => findRecord(database.pool, config.store.table, { scope, tenant, key }, args.body),
        INSPECT_WAIT_MS,
      );
      records = found ? [found] : [];
    } else {
      records = await database.whenReady(
        () => findRecordsByKey(database.pool, config.store.table, key, args.body),
        INSPECT_WAIT_MS,
      );
    }
    if (records.length === 0) {
      process.stderr.write(
        `no record for key ${JSON.stringify(key)}${args.route ? ` on ${args.route}` : ''}\n`,
      );
      return 1;
    }
    for (const record of records) process.stdout.write(`${formatRecord(record)}\n`);
    return 0;
  } finally {
    await database.close();
  }
}

function formatRecord(r: RecordView): string {
  const lines = [
    `key ${JSON.stringify(r.key)}  scope ${r.scope}${r.tenant ? `  tenant ${r.tenant.slice(0, 12)}…` : ''}  route ${r.route}`,
    `  state       ${r.state}${r.expired ? ' (expired: counts as absent)' : ''}${r.outcomeUnknown ? ' — outcome unknown' : ''}`,
    `  status      ${r.status ?? '-'}${r.bodyOmitted ? ' (body omitted: over maxResponseBytes)' : r.bodyBytes !== null ? ` (${r.bodyBytes} body bytes)` : ''}`,
    `  attempts    ${r.attempts} (requests seen), replays ${r.replays}, fence ${r.fence}`,
    `  created     ${r.createdAt}`,
    `  completed   ${r.completedAt ?? '-'}`,
    `  last seen   ${r.lastSeenAt}`,
    `  lease ends  ${r.leaseExpiresAt ?? '-'}`,
    `  expires     ${r.expiresAt}`,
    '  history:',
    ...r.history.map(
      (e) =>
        `    ${e.at}  ${e.event.padEnd(16)} fence ${e.fence}${e.status !== undefined ? `  status ${e.status}` : ''}`,
    ),
  ];
  if (r.body) lines.push(`  body (${r.body.encoding}): ${r.body.data}`);
  const partial = r.partialUpstreamAnswer;
  if (partial) {
    const cut = partial.cut ? `, only the first ${partial.storedBytes} kept` : '';
    lines.push(
      `  partial upstream answer (broke off; never replayed): status ${partial.status}, ${partial.bytes} body bytes sent${cut}`,
      ...partial.headers.map(([name, value]) => `    ${name}: ${value}`),
    );
    if (partial.body) lines.push(`  partial body (${partial.body.encoding}): ${partial.body.data}`);
  }
  return lines.join('\n');
}
