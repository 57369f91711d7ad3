// What `check` says about the store (src/db/README.md): where the keys table lives, read from the
// database the config names. `check` validates a config; a database it cannot reach is reported,
// not an error, and the embedded PostgreSQL is never started for it.
import { Client } from 'pg';
import type { ProxyConfig } from '../config/types';
import { describeTopology, detectTopology } from '../db/topology';
import { storeConnection } from '../db/pool';

const CHECK_TIMEOUT_MS = 3_000;

export async function describeStoreTopology(config: ProxyConfig): Promise<string> {
  const url = config.store.url;
  if (url === undefined)
    return 'store topology: one PostgreSQL (embedded; check does not start it)';
  const client = new Client({
    ...storeConnection(url, config.store.tls),
    connectionTimeoutMillis: CHECK_TIMEOUT_MS,
    statement_timeout: CHECK_TIMEOUT_MS,
  });
  // A failed connect also emits 'error' on the client; the rejected promise says it all.
  client.on('error', () => undefined);
  try {
    await client.connect();
    return `store topology: ${describeTopology(await detectTopology(client, config.store.table))}`;
  } catch (error) {
    return `store topology: not checked, PostgreSQL not reachable (${(error as Error).message})`;
  } finally {
    await client.end().catch(() => undefined);
  }
}
