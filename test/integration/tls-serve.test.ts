// TLS as `serve` runs it, from the built CLI: SIGHUP swaps the listener's certificate while a
// connection made before it stays open and keeps working; a bad TLS file is a startup error that
// names the file and the fix (exit 2, no stack), and `check` says the same.
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import { logLines, runCli, startServe, type ServeProcess } from '../support/cli-process';
import { databaseUrl, uniqueTable } from '../support/proxy';
import { startUpstream, type TestUpstream } from '../support/upstream';
import { makeTestCertificates, pem } from '../support/test-certificates';

const certs = makeTestCertificates();
let workDir: string;
let upstream: TestUpstream;

beforeAll(async () => {
  workDir = fs.mkdtempSync(path.join(os.tmpdir(), 'ip-tls-serve-'));
  fs.mkdirSync(path.join(workDir, 'certs'));
  upstream = await startUpstream();
});

afterAll(async () => {
  await upstream?.close();
  fs.rmSync(workDir, { recursive: true, force: true });
  certs.remove();
});

/** Writes proxy.yaml with the listener's files relative to it (certs/…), and returns its path. */
function writeConfig(name: string, files: { cert: string; key: string; ca?: string }): string {
  const file = path.join(workDir, `${name}.yaml`);
  const ca = files.ca === undefined ? '' : `, ca: ${files.ca}`;
  fs.writeFileSync(
    file,
    `listen: { host: 127.0.0.1, port: 0, tls: { cert: ${files.cert}, key: ${files.key}${ca} } }
admin: { host: 127.0.0.1, port: 0 }
store: { url: "${databaseUrl()}", table: ${uniqueTable('tls')} }
upstreams: { api: { url: "${upstream.url}" } }
routes:
  - { name: rest, match: { path: "/**" }, upstream: api, idempotency: false }
`,
  );
  return file;
}

const noStack = (text: string): void => expect(text).not.toMatch(/^\s+at .+:\d+/m);

/** One TLS connection to the proxy that the test keeps open, sending GETs on it one at a time. */
async function openConnection(port: number) {
  const socket = tls.connect({
    port,
    host: '127.0.0.1',
    servername: 'localhost',
    ca: pem(certs.ca.cert),
  });
  await new Promise<void>((resolve, reject) => {
    socket.once('secureConnect', resolve);
    socket.once('error', reject);
  });
  let buffered = '';
  socket.on('data', (chunk: Buffer) => (buffered += chunk.toString()));
  return {
    socket,
    peer: () => socket.getPeerCertificate().subject.CN,
    async get(pathname: string): Promise<string> {
      buffered = '';
      socket.write(`GET ${pathname} HTTP/1.1\r\nhost: localhost\r\n\r\n`);
      await new Promise<void>((resolve, reject) => {
        const check = (): void => {
          const end = buffered.indexOf('\r\n\r\n');
          const length = /content-length: (\d+)/i.exec(buffered);
          const whole = length
            ? buffered.length >= end + 4 + Number(length[1])
            : buffered.endsWith('\r\n0\r\n\r\n');
          if (end >= 0 && whole) {
            socket.off('data', check);
            resolve();
          }
        };
        socket.on('data', check);
        socket.once('close', () => reject(new Error(`connection closed: ${buffered}`)));
      });
      return buffered.split('\r\n')[0]!;
    },
  };
}

async function peerOfNewConnection(port: number): Promise<string | string[] | undefined> {
  const connection = await openConnection(port);
  const cn = connection.peer();
  connection.socket.destroy();
  return cn;
}

test('SIGHUP swaps the certificate for new connections; an open connection keeps working', async () => {
  const certFile = path.join(workDir, 'certs', 'proxy.crt');
  const keyFile = path.join(workDir, 'certs', 'proxy.key');
  fs.copyFileSync(certs.server.cert, certFile);
  fs.copyFileSync(certs.server.key, keyFile);
  const config = writeConfig('reload', { cert: 'certs/proxy.crt', key: 'certs/proxy.key' });
  let serve: ServeProcess | undefined;
  try {
    serve = await startServe(['--config', config], { env: { DATABASE_URL: '' } });
    const listening = logLines(serve.output(), 'idempotency-proxy listening')[0]!;
    expect(listening.msg).toMatch(/^idempotency-proxy listening on https:\/\//);
    const port = Number(listening.port);
    const kept = await openConnection(port);
    expect(kept.peer()).toBe('server');
    expect(await kept.get('/before')).toBe('HTTP/1.1 201 Created');

    fs.copyFileSync(certs.renewed.cert, certFile);
    fs.copyFileSync(certs.renewed.key, keyFile);
    process.kill(serve.pid, 'SIGHUP');
    await serve.waitFor('configuration reloaded');

    // The connection made before the reload is still open, on its old certificate.
    expect(await kept.get('/after')).toBe('HTTP/1.1 201 Created');
    expect(kept.peer()).toBe('server');
    expect(kept.socket.destroyed).toBe(false);
    expect(await peerOfNewConnection(port)).toBe('renewed');
    expect(upstream.received.map((r) => r.url)).toEqual(
      expect.arrayContaining(['/before', '/after']),
    );

    // A reload with a key that does not match is rejected; the running certificate stays.
    fs.copyFileSync(certs.server.key, keyFile);
    process.kill(serve.pid, 'SIGHUP');
    await serve.waitFor('configuration reload rejected');
    const rejected = logLines(serve.output(), 'configuration reload rejected')[0]!;
    expect(String(rejected.issues)).toContain(`${keyFile} is not the private key of ${certFile}`);
    expect(await peerOfNewConnection(port)).toBe('renewed');
    expect(await kept.get('/still')).toBe('HTTP/1.1 201 Created');
    kept.socket.destroy();
  } finally {
    if (serve) {
      process.kill(serve.pid, 'SIGTERM');
      await serve.exited();
    }
  }
});

describe('a bad TLS file stops startup with the file and the fix (exit 2)', () => {
  const cases: [string, () => { cert: string; key: string; ca?: string }, RegExp][] = [
    [
      'a missing certificate file',
      () => ({ cert: 'certs/missing.crt', key: certs.server.key }),
      /listen\.tls\.cert: cannot read .*certs\/missing\.crt \(no such file\); put the PEM certificate there or fix the path \(relative paths start at the config file's directory\)/,
    ],
    [
      'a key that does not match the certificate',
      () => ({ cert: certs.server.cert, key: certs.renewed.key }),
      /listen\.tls\.key: .*renewed\.key is not the private key of .*server\.crt \(their public keys differ\): use the key the certificate was issued for/,
    ],
    [
      'a CA that is not PEM',
      () => {
        const der = path.join(workDir, 'certs', 'ca.der');
        fs.writeFileSync(der, new crypto.X509Certificate(pem(certs.ca.cert)).raw);
        return { cert: certs.server.cert, key: certs.server.key, ca: der };
      },
      /listen\.tls\.ca: .*ca\.der is not a PEM CA certificate \(expected "-----BEGIN CERTIFICATE-----" blocks\); a DER file converts with: openssl x509 -inform der -in ca\.der -out ca\.pem/,
    ],
  ];
  test.each(cases)('%s', async (_name, files, message) => {
    const config = writeConfig('bad', files());
    for (const command of ['serve', 'check']) {
      const result = await runCli([command, '--config', config]);
      expect(result.code).toBe(2);
      expect(result.stderr).toMatch(message);
      expect(result.stderr).toMatch(
        /^idempotency-proxy: invalid configuration \(1 problem\):\n.*bad\.yaml:1:\d+ /,
      );
      noStack(result.stderr);
    }
  });
});
