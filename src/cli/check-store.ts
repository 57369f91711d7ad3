// What `check` says about the store (docs/store-topologies.md): where the keys table lives, read from the
// database the config names. `check` validates a config; a database it cannot reach is reported,
// not an error (it may just not be up where check runs), and the embedded PostgreSQL is never
// started for it. A server that answers but refuses the config's TLS settings is an error: those
// settings cannot work.
import { Client } from 'pg';
import type { ProxyConfig } from '../config/types';
import { describeTopology, detectTopology } from '../db/topology';
import { storeConnection } from '../db/pool';
import { storeTlsProblem } from '../db/tls-problem';
import { serverOf } from '../db/database-errors';

const CHECK_TIMEOUT_MS = 3_000;

export interface StoreCheck {
  readonly line: string;
  /** The server refused the TLS settings (exit 2). */
  readonly tlsRefused: boolean;
}

export async function describeStoreTopology(config: ProxyConfig): Promise<StoreCheck> {
  const url = config.store.url;
  if (url === undefined)
    return {
      line: 'store topology: one PostgreSQL (embedded; check does not start it)',
      tlsRefused: false,
    };
  const client = new Client({
    ...storeConnection(url, config.store.tls),
    connectionTimeoutMillis: CHECK_TIMEOUT_MS,
    statement_timeout: CHECK_TIMEOUT_MS,
  });
  // A failed connect also emits 'error' on the client; the rejected promise says it all.
  client.on('error', () => undefined);
  try {
    await client.connect();
    const topology = describeTopology(await detectTopology(client, config.store.table));
    return { line: `store topology: ${topology}`, tlsRefused: false };
  } catch (error) {
    const problem = storeTlsProblem(error, config.store.tls, `PostgreSQL at ${serverOf(url)}`);
    if (problem !== undefined)
      return { line: `store topology: not checked: ${problem}`, tlsRefused: true };
    return {
      line: `store topology: not checked, PostgreSQL not reachable (${(error as Error).message})`,
      tlsRefused: false,
    };
  } finally {
    await client.end().catch(() => undefined);
  }
}
