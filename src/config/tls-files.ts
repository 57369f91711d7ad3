// Reads the TLS files a config names (PEM certificates, keys and CA bundles) once, when the config
// is compiled — at startup, `check` and every SIGHUP — and checks what a TLS peer would otherwise
// refuse later: an unreadable file, something that is not PEM, a key that does not belong to its
// certificate. Each problem is an issue at the setting's own line, naming the file and the fix, so
// nothing listens or connects with material that cannot work. Relative paths start at the config
// file's directory (the URL's sslrootcert & co. at the working directory, as libpq reads them).
import { createPrivateKey, type KeyObject, X509Certificate } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { IssuePath, PathIssue } from './path-issue';
import type { ParsedConfig } from './schema';
import type {
  PemFile,
  ServerTlsConfig,
  StoreTlsConfig,
  StoreTlsMode,
  UpstreamTlsConfig,
} from './types';

type Issues = PathIssue[];
type ParsedServerTls = NonNullable<ParsedConfig['listen']['tls']>;
type ParsedUpstreamTls = NonNullable<ParsedConfig['upstreams'][string]['tls']>;
type ParsedStoreTls = NonNullable<ParsedConfig['store']['tls']>;

const CERTIFICATE_BLOCK = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g;

/** Reads one file as text, or adds an issue saying which file and what to do. */
function readFile(file: string, what: string, at: IssuePath, issues: Issues): string | undefined {
  try {
    return fs.readFileSync(file, 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? 'an error';
    if (code === 'EACCES') {
      issues.push({
        path: at,
        message: `cannot read ${file} (permission denied): make it readable by the user the proxy runs as`,
      });
      return undefined;
    }
    const reason =
      code === 'ENOENT' ? 'no such file' : code === 'EISDIR' ? 'a directory, not a file' : code;
    issues.push({
      path: at,
      message: `cannot read ${file} (${reason}); put the PEM ${what} there or fix the path (relative paths start at the config file's directory)`,
    });
    return undefined;
  }
}

/** Certificates (one, a chain, or a CA bundle): every block must parse. */
function readCertificates(
  file: string,
  what: string,
  at: IssuePath,
  issues: Issues,
): { pem: PemFile; first: X509Certificate } | undefined {
  const text = readFile(file, what, at, issues);
  if (text === undefined) return undefined;
  const blocks = text.match(CERTIFICATE_BLOCK) ?? [];
  const parsed: X509Certificate[] = [];
  for (const block of blocks) {
    try {
      parsed.push(new X509Certificate(block));
    } catch {
      break;
    }
  }
  if (blocks.length === 0 || parsed.length < blocks.length) {
    issues.push({
      path: at,
      message: `${file} is not a PEM ${what} (expected "-----BEGIN CERTIFICATE-----" blocks); a DER file converts with: openssl x509 -inform der -in ${path.basename(file)} -out ${path.basename(file, path.extname(file))}.pem`,
    });
    return undefined;
  }
  return { pem: { file, pem: text }, first: parsed[0]! };
}

function readKey(
  file: string,
  at: IssuePath,
  issues: Issues,
): { pem: PemFile; key: KeyObject } | undefined {
  const text = readFile(file, 'private key', at, issues);
  if (text === undefined) return undefined;
  try {
    return { pem: { file, pem: text }, key: createPrivateKey(text) };
  } catch (error) {
    const encrypted = /passphrase/i.test((error as Error).message);
    issues.push({
      path: at,
      message: encrypted
        ? `${file} is an encrypted private key; the proxy cannot ask for a passphrase: decrypt it with openssl pkey -in ${path.basename(file)} -out plain.key`
        : `${file} is not a PEM private key (expected "-----BEGIN PRIVATE KEY-----" or "-----BEGIN RSA/EC PRIVATE KEY-----")`,
    });
    return undefined;
  }
}

/** A certificate and its key, read together: the key must be the one the certificate was issued for. */
function readPair(
  certFile: string,
  keyFile: string,
  at: IssuePath,
  issues: Issues,
): { cert: PemFile; key: PemFile } | undefined {
  const cert = readCertificates(certFile, 'certificate', [...at, 'cert'], issues);
  const key = readKey(keyFile, [...at, 'key'], issues);
  if (!cert || !key) return undefined;
  if (!cert.first.checkPrivateKey(key.key)) {
    issues.push({
      path: [...at, 'key'],
      message: `${keyFile} is not the private key of ${certFile} (their public keys differ): use the key the certificate was issued for`,
    });
    return undefined;
  }
  return { cert: cert.pem, key: key.pem };
}

function readCa(file: string, at: IssuePath, issues: Issues): PemFile | undefined {
  return readCertificates(file, 'CA certificate', at, issues)?.pem;
}

/** The listener's (listen.tls, admin.tls) material. */
export function readServerTls(
  parsed: ParsedServerTls | undefined,
  baseDir: string,
  at: IssuePath,
  issues: Issues,
): ServerTlsConfig | undefined {
  if (parsed === undefined) return undefined;
  const resolve = (file: string) => path.resolve(baseDir, file);
  const clientAuth = parsed.clientAuth ?? 'none';
  const pair = readPair(resolve(parsed.cert), resolve(parsed.key), at, issues);
  const ca =
    parsed.ca === undefined ? undefined : readCa(resolve(parsed.ca), [...at, 'ca'], issues);
  if (clientAuth !== 'none' && parsed.ca === undefined)
    issues.push({
      path: [...at, 'clientAuth'],
      message: `clientAuth: ${clientAuth} checks client certificates against ca: set ca to the CA that issues them`,
    });
  if (!pair) return undefined;
  return { cert: pair.cert, key: pair.key, ca, clientAuth };
}

/** An upstream's client-side material. */
export function readUpstreamTls(
  parsed: ParsedUpstreamTls | undefined,
  url: string,
  baseDir: string,
  at: IssuePath,
  issues: Issues,
): UpstreamTlsConfig | undefined {
  if (parsed === undefined) return undefined;
  if (!/^https:/i.test(url)) {
    issues.push({
      path: at,
      message: 'tls applies to an https:// upstream: change url to https:// or remove tls',
    });
    return undefined;
  }
  const resolve = (file: string) => path.resolve(baseDir, file);
  const client = readClientPair(parsed, resolve, at, issues);
  const ca =
    parsed.ca === undefined ? undefined : readCa(resolve(parsed.ca), [...at, 'ca'], issues);
  return {
    ca,
    cert: client?.cert,
    key: client?.key,
    servername: parsed.servername,
    rejectUnauthorized: parsed.rejectUnauthorized ?? true,
  };
}

/** cert and key of a client (upstream mTLS, PostgreSQL `cert` auth): both or neither. */
function readClientPair(
  parsed: { readonly cert?: string | undefined; readonly key?: string | undefined },
  resolve: (file: string) => string,
  at: IssuePath,
  issues: Issues,
): { cert: PemFile; key: PemFile } | undefined {
  if (parsed.cert === undefined && parsed.key === undefined) return undefined;
  if (parsed.cert === undefined || parsed.key === undefined) {
    const missing = parsed.cert === undefined ? 'cert' : 'key';
    issues.push({
      path: [...at, missing],
      message: `a client certificate needs both cert and key: set ${missing} too`,
    });
    return undefined;
  }
  return readPair(resolve(parsed.cert), resolve(parsed.key), at, issues);
}

/** The libpq parameters of a PostgreSQL URL that decide TLS; pool.ts takes them out of the URL. */
export const URL_TLS_PARAMETERS = ['sslmode', 'sslrootcert', 'sslcert', 'sslkey', 'ssl'] as const;

/**
 * store.tls, or the URL's libpq parameters read with libpq's meaning (not pg-connection-string's,
 * which reads `require` as verify-full): `disable` is plain; `require` encrypts without verifying —
 * unless a CA is given (sslrootcert, store.tls.ca), then it is verify-ca, as in libpq; `verify-ca`,
 * `verify-full` as named; `sslrootcert=system` is Node's public CAs, with verify-full only (libpq 16).
 * `prefer`/`allow` (TLS if offered, else plain) cannot be honoured by the driver, which has no
 * fallback, and are refused rather than guessed: either guess would surprise someone (plain against
 * a server that offers TLS, or TLS against one without it).
 */
export function readStoreTls(
  parsed: ParsedStoreTls | undefined,
  url: string | undefined,
  urlPath: IssuePath,
  baseDir: string,
  issues: Issues,
): StoreTlsConfig | undefined {
  const params = url === undefined ? undefined : urlTlsParameters(url);
  const inUrl = params !== undefined && URL_TLS_PARAMETERS.some((name) => params.has(name));
  if (parsed !== undefined) {
    if (url === undefined)
      issues.push({
        path: ['store', 'tls'],
        message:
          'store.tls is for a PostgreSQL named by store.url or DATABASE_URL; the embedded one is local and plain: set the URL or remove store.tls',
      });
    if (inUrl)
      issues.push({
        path: ['store', 'tls'],
        message: `the store URL sets TLS too (${URL_TLS_PARAMETERS.filter((n) => params.has(n)).join(', ')}): keep one of them, store.tls or the URL's parameters`,
      });
    return readStoreFiles(
      parsed.mode ?? 'verify-full',
      parsed,
      (file) => path.resolve(baseDir, file),
      ['store', 'tls'],
      issues,
    );
  }
  if (!inUrl) return undefined;
  const ssl = params.get('ssl');
  const rootCert = params.get('sslrootcert') ?? undefined;
  // libpq 16: sslrootcert=system makes verify-full the default.
  const sslmode =
    params.get('sslmode') ??
    (ssl === 'false' || ssl === '0'
      ? 'disable'
      : ssl !== null || rootCert === 'system'
        ? 'verify-full'
        : 'prefer');
  if (rootCert === 'system' && sslmode !== 'verify-full') {
    // Anyone can get a publicly trusted certificate for a name they control: only the host name
    // check protects anything, and libpq refuses weaker modes with system too.
    issues.push({
      path: urlPath,
      message: `sslrootcert=system (the public CAs) needs sslmode=verify-full, not ${sslmode}: anyone can get a public certificate for a name of their own, so only the host name check protects the connection`,
    });
    return undefined;
  }
  let mode: StoreTlsMode;
  switch (sslmode) {
    case 'disable':
      return undefined;
    case 'require':
    case 'verify-ca':
    case 'verify-full':
      mode = sslmode;
      break;
    case 'allow':
    case 'prefer':
      issues.push({
        path: urlPath,
        message: `sslmode=${sslmode}${params.has('sslmode') ? '' : " (libpq's default, as the URL names no sslmode)"} (TLS if the server offers it, else plain) is not supported: use sslmode=verify-full (or require, verify-ca), or sslmode=disable`,
      });
      return undefined;
    default:
      issues.push({
        path: urlPath,
        message: `unknown sslmode=${sslmode}: expected disable, require, verify-ca or verify-full`,
      });
      return undefined;
  }
  const files = {
    ca: rootCert === 'system' ? undefined : rootCert,
    cert: params.get('sslcert') ?? undefined,
    key: params.get('sslkey') ?? undefined,
  };
  return readStoreFiles(mode, files, (file) => path.resolve(file), urlPath, issues);
}

function readStoreFiles(
  mode: StoreTlsMode,
  files: {
    readonly ca?: string | undefined;
    readonly cert?: string | undefined;
    readonly key?: string | undefined;
  },
  resolve: (file: string) => string,
  at: IssuePath,
  issues: Issues,
): StoreTlsConfig {
  const client = readClientPair(files, resolve, at, issues);
  const ca = files.ca === undefined ? undefined : readCa(resolve(files.ca), [...at, 'ca'], issues);
  // libpq: "require" with a root CA file verifies the chain, as verify-ca does. A CA given and then
  // not used would be a silent downgrade.
  const effective = mode === 'require' && files.ca !== undefined ? 'verify-ca' : mode;
  return { mode: effective, ca, cert: client?.cert, key: client?.key };
}

function urlTlsParameters(url: string): URLSearchParams | undefined {
  try {
    return new URL(url).searchParams;
  } catch {
    return undefined;
  }
}
