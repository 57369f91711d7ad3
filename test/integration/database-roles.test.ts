// The least privileges of docs/operations.md#database-roles, run as written (only the names made
// unique) on a database of their own: the migrating role migrates, the serving role — holding only
// the documented grants — serves protected requests, replays, passes /readyz and prunes, and may
// create nothing. Before the grants, serve names the missing ones; a serving role left to migrate
// says it may not.
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client } from 'pg';
import { runCli } from '../support/cli-process';
import { send } from '../support/http';
import { databaseUrl } from '../support/proxy';
import { startProxyProcess } from '../support/proxy-process';
import { startUpstream, type TestUpstream } from '../support/upstream';

const DOC = path.resolve(__dirname, '../../docs/operations.md');
const suffix = randomBytes(4).toString('hex');
const names = {
  database: `ip_roles_${suffix}`,
  migrator: `ip_migrator_${suffix}`,
  proxy: `ip_proxy_${suffix}`,
};
const password = randomBytes(12).toString('hex');

/** The section's SQL blocks, with the documented names swapped for this run's. */
function documentedSql(): { setup: string; grants: string } {
  const text = fs.readFileSync(DOC, 'utf8');
  const section = text.slice(text.indexOf('\n## Database roles\n'));
  const blocks = [...section.matchAll(/^```sql\n([\s\S]*?)^```$/gm)].map((m) => m[1]!);
  const [setup, grants] = blocks.map((sql) =>
    sql
      .replace(/\bidempotency_migrator\b/g, names.migrator)
      .replace(/\bidempotency_proxy\b/g, names.proxy)
      .replace(/DATABASE idempotency\b/g, `DATABASE ${names.database}`)
      .replace(/'change-me'/g, `'${password}'`),
  );
  if (setup === undefined || grants === undefined)
    throw new Error('docs/operations.md#database-roles: expected two ```sql blocks');
  return { setup, grants };
}

function urlAs(role: string | undefined): string {
  const url = new URL(databaseUrl());
  url.pathname = `/${names.database}`;
  if (role !== undefined) {
    url.username = role;
    url.password = password;
  }
  return url.toString();
}

async function asRole<T>(role: string | undefined, work: (client: Client) => Promise<T>) {
  const client = new Client({ connectionString: urlAs(role) });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}

let upstream: TestUpstream;
let workDir: string;
let configFile: string;
const yaml = (
  table: string,
  migrate: boolean,
) => `listen: { host: 127.0.0.1, port: "\${PROXY_PORT:-0}" }
admin: { host: 127.0.0.1, port: "\${ADMIN_PORT:-0}" }
store: { table: ${table}, migrate: ${migrate}, pruneInterval: 1h }
upstreams: { api: { url: "${upstream.url}" } }
routes:
  - { name: jobs, match: { method: POST, path: /jobs }, upstream: api, idempotency: {} }
`;

beforeAll(async () => {
  upstream = await startUpstream();
  workDir = fs.mkdtempSync(path.join(os.tmpdir(), 'ip-roles-'));
  configFile = path.join(workDir, 'proxy.yaml');
  fs.writeFileSync(configFile, yaml('idempotency_keys', false));
  const admin = new Client({ connectionString: databaseUrl() });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${names.database}`);
  await admin.end();
  await asRole(undefined, (client) => client.query(documentedSql().setup));
});

afterAll(async () => {
  await upstream.close();
  fs.rmSync(workDir, { recursive: true, force: true });
  const admin = new Client({ connectionString: databaseUrl() });
  await admin.connect();
  await admin.query(`DROP DATABASE IF EXISTS ${names.database} WITH (FORCE)`);
  await admin.query(`DROP ROLE IF EXISTS ${names.migrator}, ${names.proxy}`);
  await admin.end();
});

const cli = (role: string, ...args: string[]) =>
  runCli([...args, '--config', configFile], { env: { DATABASE_URL: urlAs(role) } });

test('the documented roles: migrate as one, serve, replay, prune as the other, which may create nothing', async () => {
  const migrated = await cli(names.migrator, 'migrate');
  expect(migrated.code).toBe(0);

  // Before the grants: serve names what is missing and the statements that give it.
  const refused = await cli(names.proxy, 'serve');
  expect(refused.code).toBe(1);
  expect(refused.stderr).toBe(
    `idempotency-proxy: role "${names.proxy}" lacks privileges the proxy needs: SELECT, INSERT, UPDATE, DELETE on "idempotency_keys"; SELECT on "idempotency_keys_migrations". As the tables' owner: GRANT SELECT, INSERT, UPDATE, DELETE ON "idempotency_keys" TO "${names.proxy}"; GRANT SELECT ON "idempotency_keys_migrations" TO "${names.proxy}";\n`,
  );

  await asRole(names.migrator, (client) => client.query(documentedSql().grants));

  const proxy = await startProxyProcess({
    yaml: yaml('idempotency_keys', false),
    env: { DATABASE_URL: urlAs(names.proxy) },
  });
  try {
    expect((await send(`${proxy.adminUrl}/readyz`, { method: 'GET' })).status).toBe(200);
    const headers = { 'idempotency-key': 'roles-1', 'content-type': 'application/json' };
    const first = await send(`${proxy.url}/jobs`, { method: 'POST', headers, body: '{}' });
    const again = await send(`${proxy.url}/jobs`, { method: 'POST', headers, body: '{}' });
    expect([first.status, again.status]).toEqual([201, 201]);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(upstream.executions()).toHaveLength(1);
  } finally {
    expect(await proxy.kill()).toBe(0);
  }

  // Expire the record (as the owner), then prune it as the serving role.
  await asRole(names.migrator, (client) =>
    client.query(
      "UPDATE idempotency_keys SET expires_at = now() - interval '1 minute', prune_after = now() - interval '1 minute'",
    ),
  );
  const pruned = await cli(names.proxy, 'prune');
  expect(pruned.code).toBe(0);
  expect(JSON.parse(pruned.stdout)).toMatchObject({ deleted: 1 });
  const left = await asRole(names.proxy, (client) =>
    client.query('SELECT count(*)::int AS n FROM idempotency_keys'),
  );
  expect(left.rows[0]).toEqual({ n: 0 });

  // The serving role can create nothing: no table of its own, no column on the keys table.
  await asRole(names.proxy, async (client) => {
    await expect(client.query('CREATE TABLE scratch (x int)')).rejects.toMatchObject({
      code: '42501',
    });
    await expect(
      client.query('ALTER TABLE idempotency_keys ADD COLUMN scratch int'),
    ).rejects.toMatchObject({ code: '42501' });
  });
});

test('serve left to migrate (the default) as the serving role refuses with what to do instead', async () => {
  const file = path.join(workDir, 'migrating.yaml');
  fs.writeFileSync(file, yaml('other_keys', true));
  const result = await runCli(['serve', '--config', file], {
    env: { DATABASE_URL: urlAs(names.proxy) },
  });
  expect(result.code).toBe(1);
  expect(result.stderr).toBe(
    `idempotency-proxy: PostgreSQL refused to migrate the store's table (permission denied for schema idempotency): the role in DATABASE_URL (or store.url) must own the table or be allowed to create it in the schema; or run \`idempotency-proxy migrate\` as such a role and serve with store.migrate: false (docs/operations.md#database-roles)\n`,
  );
});
