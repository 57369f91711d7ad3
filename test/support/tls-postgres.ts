// A PostgreSQL 15 of a test's own that speaks TLS only: ssl = on with a server certificate from the
// test CA, and a pg_hba.conf of `hostssl` lines alone, so a plain connection is refused ("no
// encryption"). The role `mtls` may log in only with a client certificate for CN=mtls
// (clientcert=verify-full, checked against ssl_ca_file); every other role needs TLS and nothing more.
import fs from 'node:fs';
import path from 'node:path';
import { PgNode } from './pg-cluster';
import type { CertFiles } from './test-certificates';

export interface TlsPostgres {
  readonly node: PgNode;
  readonly port: number;
  /** postgres://postgres@HOST:PORT/postgres, no TLS parameters. */
  url(host?: string, user?: string): string;
  /** Puts another server certificate in place for new connections (pg_reload_conf). */
  useCertificate(files: CertFiles): Promise<void>;
  dispose(): Promise<void>;
}

export async function startTlsPostgres(options: {
  readonly server: CertFiles;
  /** The CA client certificates must chain to (ssl_ca_file). */
  readonly clientCa: string;
}): Promise<TlsPostgres> {
  // The test's own statements (readiness, CREATE ROLE) need TLS too; they need not verify it.
  const node = await PgNode.init('tls', { ssl: { rejectUnauthorized: false } });
  const owner = fs.statSync(node.dataDir);
  // The server reads these as its own user; it refuses a key that others can read.
  const install = (from: string, name: string, mode: number): void => {
    const to = path.join(node.dataDir, name);
    fs.copyFileSync(from, to);
    fs.chownSync(to, owner.uid, owner.gid);
    fs.chmodSync(to, mode);
  };
  install(options.server.cert, 'server.crt', 0o644);
  install(options.server.key, 'server.key', 0o600);
  install(options.clientCa, 'client-ca.crt', 0o644);
  // Written over initdb's file: no `host` or `local` line, so only TLS connections get in.
  fs.writeFileSync(
    path.join(node.dataDir, 'pg_hba.conf'),
    [
      'hostssl all mtls 127.0.0.1/32 trust clientcert=verify-full',
      'hostssl all all 127.0.0.1/32 trust',
      '',
    ].join('\n'),
  );
  node.configure({
    ssl: 'on',
    ssl_cert_file: "'server.crt'",
    ssl_key_file: "'server.key'",
    ssl_ca_file: "'client-ca.crt'",
  });
  await node.start();
  await node.query('CREATE ROLE mtls LOGIN SUPERUSER');
  return {
    node,
    port: node.port,
    url: (host = 'localhost', user = 'postgres') =>
      `postgres://${user}@${host}:${node.port}/postgres`,
    async useCertificate(files) {
      install(files.cert, 'server.crt', 0o644);
      install(files.key, 'server.key', 0o600);
      await node.query('SELECT pg_reload_conf()');
    },
    dispose: () => node.dispose(),
  };
}
