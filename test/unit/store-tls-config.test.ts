// How store.tls and the URL's libpq parameters are read (libpq's meaning, not pg-connection-string's)
// and what pg is handed for each mode. The same modes against a real server: store-tls.test.ts.
import type { PathIssue } from '../../src/config/path-issue';
import { readStoreTls } from '../../src/config/tls-files';
import type { StoreTlsConfig } from '../../src/config/types';
import { storeConnection } from '../../src/db/pool';
import { makeTestCertificates } from '../support/test-certificates';

const certs = makeTestCertificates();
afterAll(() => certs.remove());

function read(
  url: string,
  tls?: { mode?: 'require' | 'verify-ca' | 'verify-full'; ca?: string },
): { tls: StoreTlsConfig | undefined; issues: string[] } {
  const issues: PathIssue[] = [];
  const result = readStoreTls(tls, url, ['store', 'url'], '/', issues);
  return { tls: result, issues: issues.map((i) => `${i.path.join('.')}: ${i.message}`) };
}

const base = 'postgres://u@db.example:5432/app';

describe('the mode each setting means', () => {
  test.each([
    ['sslmode=require', 'require'],
    ['sslmode=verify-ca', 'verify-ca'],
    ['sslmode=verify-full', 'verify-full'],
    ['ssl=true', 'verify-full'],
    [`sslmode=require&sslrootcert=${certs.ca.cert}`, 'verify-ca'],
    ['sslrootcert=system', 'verify-full'],
    ['sslmode=verify-full&sslrootcert=system', 'verify-full'],
  ])('%s → %s', (query, mode) => {
    const { tls, issues } = read(`${base}?${query}`);
    expect(issues).toEqual([]);
    expect(tls?.mode).toBe(mode);
  });

  test('store.tls: verify-full unless it says otherwise; require with a ca is verify-ca', () => {
    expect(read(base, {}).tls?.mode).toBe('verify-full');
    expect(read(base, { mode: 'require' }).tls?.mode).toBe('require');
    const withCa = read(base, { mode: 'require', ca: certs.ca.cert });
    expect(withCa.tls?.mode).toBe('verify-ca');
    expect(withCa.tls?.ca?.file).toBe(certs.ca.cert);
  });

  test('sslmode=disable, ssl=false or no parameter at all: plain', () => {
    for (const url of [`${base}?sslmode=disable`, `${base}?ssl=false`, base])
      expect(read(url)).toEqual({ tls: undefined, issues: [] });
  });
});

describe('refused, with what to write instead', () => {
  test.each([
    [
      'sslmode=prefer',
      'store.url: sslmode=prefer (TLS if the server offers it, else plain) is not supported: use sslmode=verify-full (or require, verify-ca), or sslmode=disable',
    ],
    [
      'sslmode=allow',
      'store.url: sslmode=allow (TLS if the server offers it, else plain) is not supported: use sslmode=verify-full (or require, verify-ca), or sslmode=disable',
    ],
    [
      `sslrootcert=${certs.ca.cert}`,
      "store.url: sslmode=prefer (libpq's default, as the URL names no sslmode) (TLS if the server offers it, else plain) is not supported: use sslmode=verify-full (or require, verify-ca), or sslmode=disable",
    ],
    [
      'sslmode=require&sslrootcert=system',
      'store.url: sslrootcert=system (the public CAs) needs sslmode=verify-full, not require: anyone can get a public certificate for a name of their own, so only the host name check protects the connection',
    ],
    [
      'sslmode=no-verify',
      'store.url: unknown sslmode=no-verify: expected disable, require, verify-ca or verify-full',
    ],
  ])('%s', (query, issue) => {
    expect(read(`${base}?${query}`).issues).toEqual([issue]);
  });

  test('store.tls and sslmode together', () => {
    expect(read(`${base}?sslmode=require`, { mode: 'verify-full' }).issues).toEqual([
      "store.tls: the store URL sets TLS too (sslmode): keep one of them, store.tls or the URL's parameters",
    ]);
  });
});

describe('what pg is handed', () => {
  const ca = { file: 'ca.pem', pem: 'PEM' };

  test('the URL loses its TLS parameters (pg-connection-string would read them its own way)', () => {
    const connection = storeConnection(
      `${base}?sslmode=verify-full&sslrootcert=x&application_name=a`,
      {
        mode: 'verify-full',
        ca,
        cert: undefined,
        key: undefined,
      },
    );
    expect(connection.connectionString).toBe(`${base}?application_name=a`);
    expect(connection.ssl).toEqual({ ca: 'PEM', rejectUnauthorized: true });
  });

  test('plain is ssl: false, so PGSSLMODE is never what decides', () => {
    expect(storeConnection(base, undefined)).toEqual({ connectionString: base, ssl: false });
    expect(storeConnection(`${base}?sslmode=disable`, undefined)).toEqual({
      connectionString: base,
      ssl: false,
    });
  });

  test('require does not verify; verify-ca checks the chain and no host name', () => {
    const tls = (mode: StoreTlsConfig['mode']) =>
      storeConnection(base, { mode, ca, cert: undefined, key: undefined }).ssl;
    expect(tls('require')).toMatchObject({ rejectUnauthorized: false });
    const verifyCa = tls('verify-ca');
    expect(verifyCa).toMatchObject({ rejectUnauthorized: true, ca: 'PEM' });
    expect(verifyCa && verifyCa.checkServerIdentity?.('db.example', {} as never)).toBeUndefined();
    expect(tls('verify-full')).not.toHaveProperty('checkServerIdentity');
  });
});
