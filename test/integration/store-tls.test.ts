// TLS to PostgreSQL against a real PostgreSQL 15 that speaks TLS only (ssl = on, a certificate for
// DNS:localhost alone from the test CA, pg_hba.conf of hostssl lines: a plain connection is refused).
// Every mode of store.tls and of the URL's libpq parameters, through the proxy's own store code:
// in-process proxies (pool and completion listener) and the built CLI (`check`, `migrate`, `serve`).
// A setting that cannot work against this server stops startup at once with exit 2 and a sentence
// saying what to change; an unreachable server is still waited for.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client } from 'pg';
import { runCli, startServe, logLines, type CliResult } from '../support/cli-process';
import { until } from '../support/eventually';
import { postJson } from '../support/http';
import { describeUnless } from '../support/run-report';
import { findFreePort } from '../../src/embedded/embedded';
import { pgClusterUnavailable, serverCommand, serverUserIds } from '../support/pg-cluster';
import { reachableCli } from '../support/reachable-cli';
import { startProxy, uniqueTable, type TestProxy } from '../support/proxy';
import {
  makeClientCertificate,
  makeTestCertificates,
  type CertFiles,
  type TestCertificates,
} from '../support/test-certificates';
import { startTlsPostgres, type TlsPostgres } from '../support/tls-postgres';
import { startUpstream, type TestUpstream } from '../support/upstream';

function unavailableHere(): string | undefined {
  const cluster = pgClusterUnavailable();
  if (cluster) return cluster;
  try {
    execFileSync('openssl', ['version'], { stdio: 'ignore' });
  } catch {
    return 'the openssl command is not installed (apt-get install openssl)';
  }
  return undefined;
}

const describeIfServer = describeUnless(unavailableHere(), 'store-tls.test.ts: no TLS store ran');

describeIfServer('store TLS against a PostgreSQL with ssl = on and hostssl only', () => {
  let certs: TestCertificates;
  let pg: TlsPostgres;
  let upstream: TestUpstream;
  let workDir: string;
  /** The upstream's gate: a request whose x-hold header is set waits for release(). */
  let release: () => void = () => undefined;
  let held = Promise.resolve();

  beforeAll(async () => {
    certs = makeTestCertificates();
    workDir = fs.mkdtempSync(path.join(os.tmpdir(), 'ip-store-tls-'));
    // The unreadable-key case runs the CLI as the server user when the suite runs as root.
    fs.chmodSync(workDir, 0o755);
    const dir = path.join(workDir, 'certs');
    fs.mkdirSync(dir);
    fs.chmodSync(dir, 0o755);
    const install = (files: CertFiles, name: string): void => {
      fs.copyFileSync(files.cert, path.join(dir, `${name}.crt`));
      fs.copyFileSync(files.key, path.join(dir, `${name}.key`));
      fs.chmodSync(path.join(dir, `${name}.key`), 0o644);
    };
    install(certs.ca, 'ca');
    install(certs.otherCa, 'other-ca');
    install(makeClientCertificate(certs, 'mtls'), 'mtls');
    install(makeClientCertificate(certs, 'mtls-untrusted', certs.otherCa), 'mtls-untrusted');
    install(certs.client, 'not-mtls');
    pg = await startTlsPostgres({ server: certs.localhostOnly, clientCa: certs.ca.cert });
    upstream = await startUpstream(async (req, res) => {
      if (req.headers['x-hold']) await held;
      res.writeHead(201, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ execution: upstream.executions().length }));
    });
  });

  afterAll(async () => {
    await upstream?.close();
    await pg?.dispose();
    if (workDir) fs.rmSync(workDir, { recursive: true, force: true });
    certs?.remove();
  });

  const cert = (name: string): string => path.join(workDir, 'certs', name);
  /** `PostgreSQL at URL`, as the messages name the server. */
  const at = (url: string): string => `PostgreSQL at ${url}`;
  const escape = (text: string): string => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

  /** A config file in workDir; `tls` is store.tls in YAML flow style (paths relative to the file). */
  function writeConfig(name: string, url: string, tls?: string): string {
    const file = path.join(workDir, `${name}.yaml`);
    fs.writeFileSync(
      file,
      `listen: { host: 127.0.0.1, port: 0 }
admin: { host: 127.0.0.1, port: 0 }
store: { url: "${url}", table: ${uniqueTable('tls')}${tls ? `, tls: ${tls}` : ''} }
upstreams: { api: { url: "${upstream.url}" } }
routes:
  - { name: pay, match: { path: /pay }, upstream: api, idempotency: {} }
`,
    );
    return file;
  }

  // DATABASE_URL (the suite's server) would override store.url.
  const cli = (args: string[], env: NodeJS.ProcessEnv = {}): Promise<CliResult> =>
    runCli(args, { env: { DATABASE_URL: '', LOG_FORMAT: 'json', ...env } });

  /** The one line a failed startup prints (after any JSON log lines on stderr). */
  function startupError(result: CliResult): string {
    const lines = result.stderr.trim().split('\n');
    const last = lines[lines.length - 1]!;
    expect(last).toMatch(/^idempotency-proxy: /);
    expect(result.stderr).not.toMatch(/^\s+at .+:\d+/m);
    return last;
  }

  const VERIFY_FULL = '{ mode: verify-full, ca: certs/ca.crt }';

  describe('through in-process proxies (the pool and the completion listener)', () => {
    let proxy: TestProxy;
    let other: TestProxy;
    const yaml = (): string => `
store: { table: "\${TEST_TABLE}", tls: { mode: verify-full, ca: ${cert('ca.crt')} } }
upstreams: { api: { url: ${upstream.url} } }
defaults: { onConcurrent: wait, waitTimeout: 20s, lockTimeout: 30s }
routes:
  - { name: pay, match: { path: /pay }, upstream: api, idempotency: {} }
`;

    beforeAll(async () => {
      proxy = await startProxy({ yaml: yaml(), databaseUrl: pg.url('localhost') });
      other = await startProxy({
        yaml: yaml(),
        databaseUrl: pg.url('localhost'),
        table: proxy.table,
      });
      // Startup waits only briefly for the listener's first LISTEN; on a busy machine it comes later.
      await until(
        () => proxy.listener.stats.connected && other.listener.stats.connected,
        'both completion listeners to prove LISTEN over TLS',
      );
    });

    afterAll(async () => {
      await other?.close();
      await proxy?.close();
    });

    test('verify-full with the CA and host localhost: every connection is TLS, a key runs once', async () => {
      upstream.received.length = 0;
      const first = await postJson(`${proxy.url}/pay`, 'tls-once', { amount: 1 });
      const second = await postJson(`${other.url}/pay`, 'tls-once', { amount: 1 });
      expect(first.status).toBe(201);
      expect(second.status).toBe(201);
      expect(second.headers['idempotent-replayed']).toBe('true');
      expect(second.text()).toBe(first.text());
      expect(upstream.executions()).toHaveLength(1);

      // The server refuses plain connections anyway; this shows which of ours it holds.
      const sessions = await pg.node.query<{ application_name: string; ssl: boolean }>(
        `SELECT a.application_name, s.ssl FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
          WHERE a.application_name LIKE 'idempotency-proxy%'`,
      );
      expect(sessions.map((s) => s.application_name)).toEqual(
        expect.arrayContaining(['idempotency-proxy', 'idempotency-proxy-listener']),
      );
      expect(sessions.every((s) => s.ssl)).toBe(true);
      expect(proxy.logs.map((l) => l.msg)).toContain('completion listener: LISTEN is delivered');
    });

    test('LISTEN over TLS wakes a duplicate waiting on another instance', async () => {
      upstream.received.length = 0;
      held = new Promise<void>((resolve) => (release = resolve));
      const notifications = proxy.listener.stats.notifications;
      expect(proxy.listener.stats.connected).toBe(true);
      const first = postJson(`${other.url}/pay`, 'tls-wait', { amount: 2 }, { 'x-hold': '1' });
      await until(() => upstream.received.length === 1, 'the first request to reach the upstream');
      const repeat = postJson(`${proxy.url}/pay`, 'tls-wait', { amount: 2 }, { 'x-hold': '1' });
      await until(() => proxy.listener.stats.waiting === 1, 'the repeat to wait');
      release();
      const [original, replayed] = await Promise.all([first, repeat]);
      expect(original.status).toBe(201);
      expect(replayed.status).toBe(201);
      expect(replayed.headers['idempotent-replayed']).toBe('true');
      expect(upstream.executions()).toHaveLength(1);
      expect(proxy.listener.stats.notifications).toBeGreaterThan(notifications);
    });
    test('at runtime, a certificate the proxy does not trust: 503, the log says what to change, and it recovers', async () => {
      upstream.received.length = 0;
      const verifies = async (): Promise<boolean> => {
        const client = new Client({
          connectionString: pg.url(),
          ssl: { ca: fs.readFileSync(cert('ca.crt'), 'utf8') },
        });
        client.on('error', () => undefined);
        try {
          await client.connect();
          return true;
        } catch {
          return false;
        } finally {
          await client.end().catch(() => undefined);
        }
      };
      await pg.useCertificate(certs.untrusted);
      try {
        await until(async () => !(await verifies()), 'the server to present the new certificate');
        // Connections already open keep their handshake: make the pool open new ones.
        await pg.node.query(
          "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'idempotency-proxy'",
        );
        await until(() => proxy.pool.totalCount === 0, 'the pool to drop its connections');
        const refused = await postJson(`${proxy.url}/pay`, 'tls-runtime', { n: 3 });
        expect(refused.status).toBe(503);
        expect(refused.json().code).toBe('STORE_UNAVAILABLE');
        expect(upstream.executions()).toHaveLength(0);
        const line = proxy.logs.find((l) => l.hint !== undefined && l.operation !== undefined);
        expect(line?.hint).toMatch(
          new RegExp(
            `^PostgreSQL presented a certificate that the CA in ${escape(cert('ca.crt'))} did not issue \\(UNABLE_TO_VERIFY_LEAF_SIGNATURE\\): point store\\.tls\\.ca`,
          ),
        );
      } finally {
        await pg.useCertificate(certs.localhostOnly);
      }
      await until(() => verifies(), 'the server to present its own certificate again');
      const served = await postJson(`${proxy.url}/pay`, 'tls-runtime', { n: 3 });
      expect(served.status).toBe(201);
      expect(upstream.executions()).toHaveLength(1);
    });
  });

  describe('connects', () => {
    test.each([
      ['verify-full, host localhost (check)', 'localhost', VERIFY_FULL],
      [
        'verify-ca, host 127.0.0.1 that the certificate does not name',
        '127.0.0.1',
        '{ mode: verify-ca, ca: certs/ca.crt }',
      ],
      ['require without a CA, host 127.0.0.1', '127.0.0.1', '{ mode: require }'],
    ])('%s', async (_name, host, tls) => {
      const result = await cli(['check', '--config', writeConfig('ok', pg.url(host), tls)]);
      expect(result.stderr).toBe('');
      expect(result.code).toBe(0);
      expect(result.stdout).toContain('store topology: one PostgreSQL\n');
    });

    test('check says which mode and CA it uses; require with a CA is verify-ca, as in libpq', async () => {
      const full = await cli(['check', '--config', writeConfig('say', pg.url(), VERIFY_FULL)]);
      expect(full.stdout).toContain(
        `TLS: verify-full (server certificate must chain to the CA and name the host); ca ${cert('ca.crt')}`,
      );
      const upgraded = writeConfig(
        'req-ca',
        pg.url('127.0.0.1'),
        '{ mode: require, ca: certs/ca.crt }',
      );
      const result = await cli(['check', '--config', upgraded]);
      expect(result.stdout).toContain('TLS: verify-ca');
      expect(result.code).toBe(0);
    });
  });

  describe('is refused at once, exit 2, with what to change', () => {
    test('verify-full to 127.0.0.1 when the certificate names only localhost (check and serve)', async () => {
      const url = pg.url('127.0.0.1');
      const config = writeConfig('mismatch', url, VERIFY_FULL);
      const expected = `${at(url)} presented a certificate for DNS:localhost, not for 127.0.0.1 (ERR_TLS_CERT_ALTNAME_INVALID): put a name the certificate holds in the URL's host, or use mode verify-ca (store.tls.mode, or sslmode in the URL) to check the CA and not the host name`;
      const check = await cli(['check', '--config', config]);
      expect(check.code).toBe(2);
      expect(check.stdout).toContain(`store topology: not checked: ${expected}\n`);
      // A wait of 10 minutes would run past the test's timeout: serve must not wait at all.
      const serve = await cli(['serve', '--config', config], { IDEMPOTENCY_PROXY_DB_WAIT: '600' });
      expect(serve.code).toBe(2);
      expect(startupError(serve)).toBe(`idempotency-proxy: ${expected}`);
      expect(serve.stdout).not.toContain('not reachable yet');
    });

    test('a CA that did not issue the server certificate (migrate)', async () => {
      const url = pg.url();
      const config = writeConfig('wrong-ca', url, '{ mode: verify-full, ca: certs/other-ca.crt }');
      const result = await cli(['migrate', '--config', config]);
      expect(result.code).toBe(2);
      expect(startupError(result)).toMatch(
        new RegExp(
          `^idempotency-proxy: ${escape(at(url))} presented a certificate that the CA in ${escape(cert('other-ca.crt'))} did not issue \\((SELF_SIGNED_CERT_IN_CHAIN|UNABLE_TO_VERIFY_LEAF_SIGNATURE)\\): point store\\.tls\\.ca \\(or sslrootcert in the URL\\) at the CA that issued the server's certificate`,
        ),
      );
    });

    test('require with the wrong CA verifies the chain (libpq), and fails like verify-ca', async () => {
      const config = writeConfig(
        'req-wrong',
        pg.url('127.0.0.1'),
        '{ mode: require, ca: certs/other-ca.crt }',
      );
      const result = await cli(['migrate', '--config', config]);
      expect(result.code).toBe(2);
      expect(startupError(result)).toContain(
        `that the CA in ${cert('other-ca.crt')} did not issue`,
      );
    });

    test.each([
      ['sslmode=disable', '?sslmode=disable'],
      ['no TLS setting at all', ''],
    ])('a plain connection: %s', async (_name, query) => {
      const url = `${pg.url()}${query}`;
      const result = await cli(['migrate', '--config', writeConfig('plain', url)]);
      expect(result.code).toBe(2);
      expect(startupError(result)).toBe(
        `idempotency-proxy: ${at(url)} requires TLS and refused a plain connection (no pg_hba.conf entry for host "127.0.0.1", user "postgres", database "postgres", no encryption): its pg_hba.conf has only hostssl lines for this client; set store.tls (mode verify-full and ca) or sslmode=verify-full&sslrootcert=… in the URL`,
      );
    });
  });

  describe('mTLS: the role mtls needs a client certificate (clientcert=verify-full)', () => {
    const url = (): string => pg.url('localhost', 'mtls');
    const withCert = (name: string): string =>
      `{ mode: verify-full, ca: certs/ca.crt, cert: certs/${name}.crt, key: certs/${name}.key }`;

    test('with its certificate and key: migrate and prune run, check connects', async () => {
      const config = writeConfig('mtls', url(), withCert('mtls'));
      const migrate = await cli(['migrate', '--config', config]);
      expect(migrate.code).toBe(0);
      expect(migrate.stderr).toMatch(/applied \d+ migration\(s\)/);
      const prune = await cli(['prune', '--config', config]);
      expect(prune.code).toBe(0);
      expect(JSON.parse(prune.stdout)).toMatchObject({ deleted: 0 });
      const check = await cli(['check', '--config', config]);
      expect(check.code).toBe(0);
      expect(check.stdout).toContain(`client cert ${cert('mtls.crt')}`);
      expect(check.stdout).toContain('store topology: one PostgreSQL\n');
    });

    test('without one', async () => {
      const result = await cli([
        'migrate',
        '--config',
        writeConfig('mtls-none', url(), VERIFY_FULL),
      ]);
      expect(result.code).toBe(2);
      expect(startupError(result)).toBe(
        `idempotency-proxy: ${at(url())} requires a client certificate (connection requires a valid client certificate): set store.tls.cert and store.tls.key (or sslcert and sslkey in the URL) to a certificate issued by the CA in the server's ssl_ca_file`,
      );
    });

    test('with one from a CA the server does not trust', async () => {
      const config = writeConfig('mtls-untrusted', url(), withCert('mtls-untrusted'));
      const result = await cli(['migrate', '--config', config]);
      expect(result.code).toBe(2);
      expect(startupError(result)).toBe(
        `idempotency-proxy: ${at(url())} refused the client certificate ${cert('mtls-untrusted.crt')} (ERR_SSL_TLSV1_ALERT_UNKNOWN_CA): use a certificate issued by the CA in the server's ssl_ca_file`,
      );
    });

    test('with one for another name (CN=client, user mtls)', async () => {
      const result = await cli([
        'migrate',
        '--config',
        writeConfig('mtls-cn', url(), withCert('not-mtls')),
      ]);
      expect(result.code).toBe(2);
      expect(startupError(result)).toBe(
        `idempotency-proxy: ${at(url())} did not accept the client certificate ${cert('not-mtls.crt')} for this user ("trust" authentication failed for user "mtls"): with clientcert=verify-full its CN must be the user name in the URL (or mapped to it in pg_ident.conf)`,
      );
    });
  });

  describe("the URL's libpq parameters behave like store.tls", () => {
    test('sslmode=verify-full&sslrootcert: serve runs a protected request once for two sends, LISTEN over TLS', async () => {
      upstream.received.length = 0;
      const url = `${pg.url()}?sslmode=verify-full&sslrootcert=${encodeURIComponent(cert('ca.crt'))}`;
      // DATABASE_URL, as operators often set it; store.url holds the same (a config needs one).
      const serve = await startServe(['--config', writeConfig('url-serve', url)], {
        env: { DATABASE_URL: url },
      });
      try {
        await serve.waitFor('completion listener: LISTEN is delivered');
        const port = Number(logLines(serve.output(), 'idempotency-proxy listening')[0]!.port);
        const first = await postJson(`http://127.0.0.1:${port}/pay`, 'url-once', { n: 1 });
        const second = await postJson(`http://127.0.0.1:${port}/pay`, 'url-once', { n: 1 });
        expect(first.status).toBe(201);
        expect(second.status).toBe(201);
        expect(second.headers['idempotent-replayed']).toBe('true');
        expect(upstream.executions()).toHaveLength(1);
      } finally {
        serve.child.kill('SIGTERM');
        expect(await serve.exited()).toBe(0);
      }
    });

    test.each([
      [
        'sslmode=verify-full to 127.0.0.1',
        '127.0.0.1',
        'sslmode=verify-full',
        2,
        /presented a certificate for DNS:localhost, not for 127\.0\.0\.1/,
      ],
      [
        'sslmode=verify-ca to 127.0.0.1',
        '127.0.0.1',
        'sslmode=verify-ca',
        0,
        /store topology: one PostgreSQL/,
      ],
      [
        'sslmode=require with the wrong sslrootcert (verify-ca)',
        '127.0.0.1',
        'sslmode=require&other',
        2,
        /other-ca\.crt did not issue/,
      ],
      [
        'sslmode=require, no sslrootcert',
        '127.0.0.1',
        'sslmode=require&none',
        0,
        /store topology: one PostgreSQL/,
      ],
      [
        'sslmode=verify-full, no sslrootcert (public CAs only)',
        'localhost',
        'sslmode=verify-full&none',
        2,
        /presented a certificate that no public CA issued \([A-Z_]+; with no store\.tls\.ca only Node's built-in public CAs are trusted\)/,
      ],
    ])('%s', async (_name, host, params, code, expected) => {
      const [mode, which] = params.split('&');
      const rootCert =
        which === 'none'
          ? ''
          : `&sslrootcert=${cert(which === 'other' ? 'other-ca.crt' : 'ca.crt')}`;
      const result = await cli([
        'check',
        '--config',
        writeConfig('url', `${pg.url(host)}?${mode}${rootCert}`),
      ]);
      expect(result.code).toBe(code);
      expect(result.stdout).toMatch(expected);
    });
  });

  describe('bad TLS files stop startup with the file and the fix (exit 2)', () => {
    test.each([
      [
        'a missing CA file',
        '{ mode: verify-full, ca: certs/missing-ca.crt }',
        () =>
          `store.tls.ca: cannot read ${cert('missing-ca.crt')} (no such file); put the PEM CA certificate there or fix the path (relative paths start at the config file's directory)`,
      ],
      [
        'a key that does not belong to the certificate',
        '{ mode: verify-full, ca: certs/ca.crt, cert: certs/mtls.crt, key: certs/not-mtls.key }',
        () =>
          `store.tls.key: ${cert('not-mtls.key')} is not the private key of ${cert('mtls.crt')} (their public keys differ): use the key the certificate was issued for`,
      ],
      [
        'a key file that is not a key',
        '{ mode: verify-full, ca: certs/ca.crt, cert: certs/mtls.crt, key: certs/ca.crt }',
        () =>
          `store.tls.key: ${cert('ca.crt')} is not a PEM private key (expected "-----BEGIN PRIVATE KEY-----" or "-----BEGIN RSA/EC PRIVATE KEY-----")`,
      ],
    ])('%s', async (_name, tls, message) => {
      const config = writeConfig('bad', pg.url(), tls);
      for (const command of ['serve', 'check']) {
        const result = await cli([command, '--config', config]);
        expect(result.code).toBe(2);
        expect(result.stderr).toMatch(/^idempotency-proxy: invalid configuration \(1 problem\):\n/);
        expect(result.stderr).toMatch(new RegExp(`bad\\.yaml:3:\\d+ ${escape(message())}\\n$`));
      }
    });

    test('an unreadable key (mode 000, the CLI run as a user who is not its owner)', async () => {
      const key = cert('unreadable.key');
      fs.copyFileSync(cert('mtls.key'), key);
      fs.chmodSync(key, 0o000);
      const config = writeConfig(
        'unreadable',
        pg.url(),
        '{ mode: verify-full, ca: certs/ca.crt, cert: certs/mtls.crt, key: certs/unreadable.key }',
      );
      fs.chmodSync(config, 0o644);
      // As root every file is readable: run the CLI as the server user instead (pg-cluster's way),
      // from a copy it can enter when this checkout (or node) sits where it cannot (a 0700 home).
      const asServer = serverUserIds();
      const reachable = asServer ? reachableCli({ name: 'postgres', ...asServer }) : undefined;
      const result = await runCli(['check', '--config', config], {
        env: { DATABASE_URL: '' },
        ...(reachable ? { launcher: reachable.launcher } : {}),
        wrap: (argv) => serverCommand(argv),
      }).finally(() => reachable?.remove());
      expect(result.code).toBe(2);
      expect(result.stderr).toContain(
        `store.tls.key: cannot read ${key} (permission denied): make it readable by the user the proxy runs as\n`,
      );
    });

    test('sslmode=prefer is refused, not guessed', async () => {
      const result = await cli([
        'check',
        '--config',
        writeConfig('prefer', `${pg.url()}?sslmode=prefer`),
      ]);
      expect(result.code).toBe(2);
      expect(result.stderr).toContain(
        'store.url: sslmode=prefer (TLS if the server offers it, else plain) is not supported: use sslmode=verify-full (or require, verify-ca), or sslmode=disable',
      );
    });
  });

  test('a server that does not answer yet is waited for, not refused as a TLS problem', async () => {
    // A port nobody listens on: connection refused is worth waiting for (docker-compose order).
    const port = await findFreePort();
    const url = `postgres://postgres@localhost:${port}/postgres`;
    const config = writeConfig('down', url, VERIFY_FULL);
    const result = await cli(['migrate', '--config', config], { IDEMPOTENCY_PROXY_DB_WAIT: '1' });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('PostgreSQL is not reachable yet');
    expect(startupError(result)).toMatch(
      /^idempotency-proxy: cannot reach PostgreSQL at .* after waiting \d+ s/,
    );
  });
});
