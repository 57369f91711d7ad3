// The files and settings that close the embedded PostgreSQL to other users, and the port it keeps:
// what goes into the data dir, with which modes, and what the postmaster is told. (That nobody else
// gets in is proven with real processes in test/integration/embedded-access.test.ts.)
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { rememberedPort, rememberPort, stateFile } from '../../src/embedded/embedded-state';
import {
  accessSettings,
  embeddedUrl,
  embeddedUrlHint,
  newPassword,
  passwordFile,
  readPassword,
  writeAuthConfig,
  writePasswordFile,
} from '../../src/embedded/server-access';

let dataDir: string;
beforeEach(() => {
  dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'ip-access-'));
});
afterEach(() => fs.rmSync(dataDir, { recursive: true, force: true }));

test('a new password is 32 random bytes, URL-safe, never the same twice', () => {
  const [a, b] = [newPassword(), newPassword()];
  expect(a).toMatch(/^[A-Za-z0-9_-]{43}$/);
  expect(a).not.toBe(b);
  expect(embeddedUrl(5433, a)).toBe(`postgres://postgres:${a}@127.0.0.1:5433/postgres`);
});

test('the password file is 0600, read back as written; none is undefined', () => {
  expect(readPassword(dataDir)).toBeUndefined();
  writePasswordFile(dataDir, 'secret-1');
  expect(fs.statSync(passwordFile(dataDir)).mode & 0o777).toBe(0o600);
  expect(readPassword(dataDir)).toBe('secret-1');
  writePasswordFile(dataDir, 'secret-2'); // replaced whole
  expect(readPassword(dataDir)).toBe('secret-2');
  expect(fs.readdirSync(dataDir)).toEqual(['idempotency-proxy.password']);
});

test('the DATABASE_URL hint reads the password from its file instead of printing it', () => {
  writePasswordFile(dataDir, 'do-not-print');
  const hint = embeddedUrlHint(dataDir, 5433);
  expect(hint).toBe(
    `"postgres://postgres:$(cat ${dataDir}/idempotency-proxy.password)@127.0.0.1:5433/postgres"`,
  );
  expect(hint).not.toContain('do-not-print');
});

test('pg_hba.conf: peer on the socket, scram-sha-256 on 127.0.0.1, nothing else; both files 0600', () => {
  fs.writeFileSync(path.join(dataDir, 'pg_hba.conf'), 'host all all 0.0.0.0/0 trust\n', {
    mode: 0o644,
  });
  writeAuthConfig(dataDir, undefined);
  const rules = (file: string) =>
    fs
      .readFileSync(path.join(dataDir, file), 'utf8')
      .split('\n')
      .filter((line) => line.trim() && !line.startsWith('#'))
      .map((line) => line.split(/\s+/));
  expect(rules('pg_hba.conf')).toEqual([
    ['local', 'all', 'all', 'peer', 'map=owner'],
    ['host', 'all', 'all', '127.0.0.1/32', 'scram-sha-256'],
  ]);
  expect(rules('pg_ident.conf')).toEqual([['owner', os.userInfo().username, 'postgres']]);
  for (const file of ['pg_hba.conf', 'pg_ident.conf'])
    expect(fs.statSync(path.join(dataDir, file)).mode & 0o777).toBe(0o600);
});

test('the postmaster listens on 127.0.0.1, its socket in the data dir, 0700', () => {
  const { args, socket } = accessSettings('/var/lib/ip, one', 5433);
  expect(socket).toBe(true);
  expect(args).toEqual([
    '-c',
    'listen_addresses=127.0.0.1',
    '-c',
    'unix_socket_directories="/var/lib/ip, one"',
    '-c',
    'unix_socket_permissions=0700',
    '-c',
    'password_encryption=scram-sha-256',
  ]);
});

test('a data dir too long for a socket path gets no socket (TCP only), never one elsewhere', () => {
  const long = `/${'d'.repeat(99)}`;
  const { args, socket } = accessSettings(long, 5433);
  expect(socket).toBe(false);
  expect(args).toContain('unix_socket_directories=');
  expect(accessSettings(`/${'d'.repeat(91)}`, 65535).socket).toBe(true); // 107 bytes: fits
  expect(accessSettings(`/${'d'.repeat(92)}`, 65535).socket).toBe(false);
});

test('the port is remembered in the state file; an unreadable or odd one is none', () => {
  expect(rememberedPort(dataDir)).toBeUndefined();
  rememberPort(dataDir, 5433);
  expect(rememberedPort(dataDir)).toBe(5433);
  rememberPort(dataDir, 41234);
  expect(rememberedPort(dataDir)).toBe(41234);
  for (const text of ['', '{', '{"port":0}', '{"port":70000}', '{"port":"5433"}', '[]']) {
    fs.writeFileSync(stateFile(dataDir), text);
    expect(rememberedPort(dataDir)).toBeUndefined();
  }
});
