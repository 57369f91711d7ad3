// Certificates for the TLS tests, made with the openssl CLI in a temporary directory: a private CA,
// an unrelated CA, server certificates (with SANs) for 127.0.0.1/localhost, for another host name
// and an expired one, and client certificates. EC P-256 keys: quick to make.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export interface CertFiles {
  readonly cert: string;
  readonly key: string;
}

export interface TestCertificates {
  readonly dir: string;
  /** The private CA everything below is issued by (except otherCa's). */
  readonly ca: CertFiles;
  /** A CA nobody trusts. */
  readonly otherCa: CertFiles;
  /** Server certificate for DNS:localhost and IP:127.0.0.1. */
  readonly server: CertFiles;
  /** Another one for the same names (a renewal, for a reload). */
  readonly renewed: CertFiles;
  /** Server certificate for wrong.example only. */
  readonly wrongHost: CertFiles;
  /** Server certificate for localhost/127.0.0.1 that expired yesterday. */
  readonly expired: CertFiles;
  /** Server certificate for localhost/127.0.0.1 from otherCa. */
  readonly untrusted: CertFiles;
  /** Server certificate for DNS:localhost only (not 127.0.0.1), for verify-ca vs verify-full. */
  readonly localhostOnly: CertFiles;
  /** Client certificate (clientAuth) from ca. */
  readonly client: CertFiles;
  remove(): void;
}

const openssl = (args: string[], cwd: string): void => {
  execFileSync('openssl', args, { cwd, stdio: ['ignore', 'ignore', 'pipe'] });
};

const KEY = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];

function makeCa(dir: string, name: string): CertFiles {
  openssl(
    [
      'req',
      '-x509',
      ...KEY,
      '-keyout',
      `${name}.key`,
      '-out',
      `${name}.crt`,
      '-subj',
      `/CN=${name}`,
      '-days',
      '3',
      '-addext',
      'basicConstraints=critical,CA:TRUE',
      '-addext',
      'keyUsage=critical,keyCertSign,cRLSign',
    ],
    dir,
  );
  return { cert: path.join(dir, `${name}.crt`), key: path.join(dir, `${name}.key`) };
}

let serial = 1;

function makeLeaf(
  dir: string,
  name: string,
  issuer: CertFiles,
  options: { san?: string; usage: 'serverAuth' | 'clientAuth'; expired?: boolean },
): CertFiles {
  openssl(
    [
      'req',
      '-new',
      ...KEY,
      '-keyout',
      `${name}.key`,
      '-out',
      `${name}.csr`,
      '-subj',
      `/CN=${name}`,
    ],
    dir,
  );
  const ext = [
    'basicConstraints=CA:FALSE',
    `extendedKeyUsage=${options.usage}`,
    ...(options.san ? [`subjectAltName=${options.san}`] : []),
  ];
  fs.writeFileSync(path.join(dir, `${name}.ext`), `${ext.join('\n')}\n`);
  const csr = path.join(dir, `${name}.csr`);
  const out = path.join(dir, `${name}.crt`);
  if (options.expired) {
    // `openssl x509` (3.0) cannot backdate; `openssl ca` can, with a minimal database of its own.
    const db = path.join(dir, `${name}.db`);
    fs.writeFileSync(db, '');
    fs.writeFileSync(
      path.join(dir, `${name}.cnf`),
      `[ca]\ndefault_ca=d\n[d]\ndatabase=${db}\nnew_certs_dir=${dir}\nserial=${path.join(dir, `${name}.serial`)}\ndefault_md=sha256\npolicy=p\nunique_subject=no\n[p]\ncommonName=supplied\n`,
    );
    fs.writeFileSync(path.join(dir, `${name}.serial`), `${(0x1000 + serial++).toString(16)}\n`);
    openssl(
      [
        'ca',
        '-batch',
        '-config',
        `${name}.cnf`,
        '-cert',
        issuer.cert,
        '-keyfile',
        issuer.key,
        '-in',
        csr,
        '-out',
        out,
        '-startdate',
        '20200101000000Z',
        '-enddate',
        '20200102000000Z',
        '-extfile',
        `${name}.ext`,
        '-notext',
      ],
      dir,
    );
  } else {
    openssl(
      [
        'x509',
        '-req',
        '-in',
        csr,
        '-CA',
        issuer.cert,
        '-CAkey',
        issuer.key,
        '-set_serial',
        String(serial++),
        '-days',
        '2',
        '-extfile',
        `${name}.ext`,
        '-out',
        out,
      ],
      dir,
    );
  }
  return { cert: out, key: path.join(dir, `${name}.key`) };
}

const LOCAL = 'DNS:localhost,IP:127.0.0.1';

export function makeTestCertificates(): TestCertificates {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ip-certs-'));
  // The server user of a test PostgreSQL reads some of these (as root the mkdtemp is 0700).
  fs.chmodSync(dir, 0o755);
  const ca = makeCa(dir, 'test-ca');
  const otherCa = makeCa(dir, 'other-ca');
  const server = makeLeaf(dir, 'server', ca, { san: LOCAL, usage: 'serverAuth' });
  const renewed = makeLeaf(dir, 'renewed', ca, { san: LOCAL, usage: 'serverAuth' });
  const wrongHost = makeLeaf(dir, 'wrong-host', ca, {
    san: 'DNS:wrong.example',
    usage: 'serverAuth',
  });
  const expired = makeLeaf(dir, 'expired', ca, { san: LOCAL, usage: 'serverAuth', expired: true });
  const untrusted = makeLeaf(dir, 'untrusted', otherCa, { san: LOCAL, usage: 'serverAuth' });
  const localhostOnly = makeLeaf(dir, 'localhost-only', ca, {
    san: 'DNS:localhost',
    usage: 'serverAuth',
  });
  const client = makeLeaf(dir, 'client', ca, { usage: 'clientAuth' });
  return {
    dir,
    ca,
    otherCa,
    server,
    renewed,
    wrongHost,
    expired,
    untrusted,
    localhostOnly,
    client,
    remove: () => fs.rmSync(dir, { recursive: true, force: true }),
  };
}

/** The PEM text of a file, for Node's TLS options. */
export const pem = (file: string): string => fs.readFileSync(file, 'utf8');

/**
 * One more client certificate from `issuer`, for CN=`name` (PostgreSQL's clientcert=verify-full
 * wants the role's name there), in `certs.dir`.
 */
export function makeClientCertificate(
  certs: TestCertificates,
  name: string,
  issuer: CertFiles = certs.ca,
): CertFiles {
  return makeLeaf(certs.dir, name, issuer, { usage: 'clientAuth' });
}
