// TLS settings: the listener's, an upstream's and the store's, each naming its PEM files.
import { z } from 'zod';
import { bool, opt, pattern, strict } from './schema-formats';

// TLS material is named by file (PEM), relative to the config file's directory; the compiler reads
// and checks the files, so a bad one is an error at its line before anything listens.
export const pemFile = pattern(/./, 'expected a path to a PEM file', 'PEM file');

export function listenerTls(what: string) {
  return opt(
    strict(
      {
        cert: pemFile.describe(`The ${what} certificate (chain), PEM.`),
        key: pemFile.describe('Its private key, PEM.'),
        ca: opt(pemFile, 'CA certificates client certificates must chain to (clientAuth).'),
        clientAuth: opt(
          z.enum(['none', 'request', 'require'], {
            error: 'expected none, request or require',
          }),
          'Client certificates: none; request (asked for, not required); require (refused without one from ca).',
          'none',
        ),
      },
      'TLS settings (cert, key, ca, clientAuth)',
    ),
    `Serve ${what} over TLS (HTTPS, ALPN http/1.1); SIGHUP re-reads cert, key and ca.`,
  );
}

export const upstreamTls = strict(
  {
    ca: opt(
      pemFile,
      "CA certificates the upstream's certificate must chain to (instead of the system's).",
    ),
    cert: opt(pemFile, 'Client certificate for upstreams that require one (mTLS), PEM.'),
    key: opt(pemFile, 'Its private key, PEM.'),
    servername: opt(
      pattern(/^[^\s/:]+$/, 'expected a host name', 'host name'),
      "Host name sent (SNI) and verified instead of the URL's.",
    ),
    rejectUnauthorized: opt(
      bool,
      'false accepts any certificate (testing only: anyone on the path can answer).',
      true,
    ),
  },
  'upstream TLS settings (ca, cert, key, servername, rejectUnauthorized)',
);

export const storeTls = strict(
  {
    mode: opt(
      z.enum(['require', 'verify-ca', 'verify-full'], {
        error: 'expected require, verify-ca or verify-full',
      }),
      "require: encrypted, server not verified (with a ca: as verify-ca, like libpq); verify-ca: its certificate chains to ca; verify-full: and names the URL's host.",
      'verify-full',
    ),
    ca: opt(pemFile, "CA certificates the server's certificate must chain to (else the system's)."),
    cert: opt(pemFile, 'Client certificate, for servers that ask for one (hostssl … cert), PEM.'),
    key: opt(pemFile, 'Its private key, PEM.'),
  },
  'store TLS settings (mode, ca, cert, key)',
);
