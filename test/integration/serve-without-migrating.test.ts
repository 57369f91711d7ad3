// store.migrate: false — serve checks the schema instead of migrating it (migrations run apart, as
// a Kubernetes Job): it serves on a schema at this build's version (or newer), and refuses to start,
// exit 1 with one line saying what to run, on a table that is missing or behind. Refusing must not
// create or change anything.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { quoteTableName } from '../../src/db/identifier';
import { LATEST_VERSION } from '../../src/db/migrate';
import { createPool } from '../../src/db/pool';
import { runCli } from '../support/cli-process';
import { send } from '../support/http';
import { databaseUrl, uniqueTable } from '../support/proxy';
import { startProxyProcess } from '../support/proxy-process';
import { startUpstream, type TestUpstream } from '../support/upstream';

const pool = createPool({ url: databaseUrl(), size: 2, onError: () => undefined });
let upstream: TestUpstream;
let workDir: string;

beforeAll(async () => {
  upstream = await startUpstream();
  workDir = fs.mkdtempSync(path.join(os.tmpdir(), 'ip-no-migrate-'));
});

afterAll(async () => {
  await upstream.close();
  await pool.end();
  fs.rmSync(workDir, { recursive: true, force: true });
});

/** The config, with the listeners' ports as startProxyProcess expects and migrations left to others. */
function yaml(table: string): string {
  return `listen: { host: 127.0.0.1, port: "\${PROXY_PORT:-0}" }
admin: { host: 127.0.0.1, port: "\${ADMIN_PORT:-0}" }
store: { table: ${table}, migrate: false }
upstreams: { api: { url: "${upstream.url}" } }
routes:
  - { name: jobs, match: { method: POST, path: /jobs }, upstream: api, idempotency: {} }
`;
}

function configFile(table: string): string {
  const file = path.join(workDir, `${table}.yaml`);
  fs.writeFileSync(file, yaml(table));
  return file;
}

const migrateWith = (table: string) => runCli(['migrate', '--config', configFile(table)]);
const serveWith = (table: string) => runCli(['serve', '--config', configFile(table)]);

async function tablesNamed(table: string): Promise<string[]> {
  const { rows } = await pool.query<{ name: string }>(
    `SELECT tablename AS name FROM pg_tables WHERE tablename IN ($1::text, $2::text) ORDER BY 1`,
    [table, `${table}_migrations`],
  );
  return rows.map((row) => row.name);
}

test('serves on a schema that `migrate` brought to this version, and answers requests', async () => {
  const table = uniqueTable('nomig');
  expect((await migrateWith(table)).code).toBe(0);
  const proxy = await startProxyProcess({ yaml: yaml(table) });
  try {
    expect(proxy.output()).toContain('store schema checked (store.migrate is false');
    expect(proxy.output()).not.toContain('store schema is up to date');
    const ready = await send(`${proxy.adminUrl}/readyz`, { method: 'GET' });
    expect(ready.status).toBe(200);
    const headers = { 'idempotency-key': 'job-1', 'content-type': 'application/json' };
    const first = await send(`${proxy.url}/jobs`, { method: 'POST', headers, body: '{"n":1}' });
    const again = await send(`${proxy.url}/jobs`, { method: 'POST', headers, body: '{"n":1}' });
    expect([first.status, again.status]).toEqual([201, 201]);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(upstream.executions().filter((r) => r.url === '/jobs')).toHaveLength(1);
  } finally {
    await proxy.kill();
  }
});

test('serves on a schema a newer build migrated (a replica an upgrade has not replaced yet)', async () => {
  const table = uniqueTable('nomig');
  expect((await migrateWith(table)).code).toBe(0);
  await pool.query(
    `INSERT INTO ${quoteTableName(`${table}_migrations`)} (version, name) VALUES ($1::int, 'from a newer build')`,
    [LATEST_VERSION + 1],
  );
  const proxy = await startProxyProcess({ yaml: yaml(table) });
  try {
    expect((await send(`${proxy.adminUrl}/readyz`, { method: 'GET' })).status).toBe(200);
  } finally {
    await proxy.kill();
  }
});

test('refuses to start on a database without the table: exit 1, what to run, nothing created', async () => {
  const table = uniqueTable('nomig');
  const result = await serveWith(table);
  expect(result.code).toBe(1);
  expect(result.stderr).toBe(
    `idempotency-proxy: the store's table "${table}" does not exist in the schemas role "${await currentUser()}" sees (search_path) (store.migrate is false, so serve does not migrate): run \`idempotency-proxy migrate\` with a role that may create tables (the migration Job), then start the proxy again\n`,
  );
  expect(await tablesNamed(table)).toEqual([]);
});

test('refuses to start on a schema behind this build: exit 1, both versions, nothing migrated', async () => {
  const table = uniqueTable('nomig');
  expect((await migrateWith(table)).code).toBe(0);
  const versions = quoteTableName(`${table}_migrations`);
  await pool.query(`DELETE FROM ${versions} WHERE version = $1::int`, [LATEST_VERSION]);
  const result = await serveWith(table);
  expect(result.code).toBe(1);
  expect(result.stderr).toBe(
    `idempotency-proxy: the store's schema is at version ${LATEST_VERSION - 1} and this build needs ${LATEST_VERSION} (store.migrate is false, so serve does not migrate): run \`idempotency-proxy migrate\` with a role that may create tables (the migration Job), then start the proxy again\n`,
  );
  const { rows } = await pool.query<{ version: number }>(
    `SELECT max(version) AS version FROM ${versions}`,
  );
  expect(rows[0]?.version).toBe(LATEST_VERSION - 1);
});

async function currentUser(): Promise<string> {
  const { rows } = await pool.query<{ role: string }>('SELECT current_user AS role');
  return rows[0]!.role;
}
