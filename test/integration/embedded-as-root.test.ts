// As root, the embedded PostgreSQL runs as the `postgres` user. In a checkout under a 0700 directory
// (a root home) that user can reach neither the binaries in node_modules nor a data dir inside the
// checkout. The proxy must not open up those directories: it runs a copy of the binaries from the
// temp dir, and places a data dir that user cannot reach in its state dir, saying so. Tested with
// a real checkout copy under a real 0700 directory; skipped when not running as root.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { placeDataDir } from '../../src/embedded/data-dir-placement';
import { findFreePort } from '../../src/embedded/embedded';
import { existingServerUser } from '../../src/embedded/server-user';
import { runningPostmaster } from '../../src/embedded/embedded-state';
import { makeCheckout } from '../support/checkout';
import { runCli, startServe } from '../support/cli-process';
import { postJson } from '../support/http';
import { startUpstream, type TestUpstream } from '../support/upstream';
import { describeUnless } from '../support/run-report';

const asRoot = process.getuid?.() === 0;
let closed: string; // the 0700 directory
let checkout: string;
let tmpDir: string;
let stateDir: string; // where unreachable data dirs are placed (IDEMPOTENCY_PROXY_STATE_DIR)
let upstream: TestUpstream;

/** Modes of `dir` and everything above it: what the proxy must leave as it found them. */
function modesUpTo(dir: string): Record<string, number> {
  const modes: Record<string, number> = {};
  for (let d = dir; ; d = path.dirname(d)) {
    modes[d] = fs.statSync(d).mode;
    if (d === path.dirname(d)) return modes;
  }
}

describeUnless(
  !asRoot && 'not running as root (run the suite as root to try the postgres-user placement)',
  'embedded-as-root.test.ts: the embedded server was not tried as root',
)('as root, in a checkout under a 0700 directory', () => {
  beforeAll(async () => {
    upstream = await startUpstream();
    closed = fs.mkdtempSync(path.join(os.tmpdir(), 'ip-0700-')); // mkdtemp: mode 0700
    checkout = path.join(closed, 'checkout');
    makeCheckout(checkout);
    // The proxy's temp dir for its copy of the binaries, so this test sees (and removes) it.
    tmpDir = fs.mkdtempSync(path.join(os.tmpdir(), 'ip-root-tmp-'));
    fs.chmodSync(tmpDir, 0o755);
    stateDir = path.join(tmpDir, 'state');
    fs.writeFileSync(
      path.join(checkout, 'proxy.yaml'),
      `listen: { host: 127.0.0.1, port: "\${PROXY_PORT}" }
admin: { host: 127.0.0.1, port: 0 }
store: { dataDir: "\${IDEMPOTENCY_PROXY_DATA_DIR:-.data/postgres}" }
upstreams: { api: { url: ${upstream.url} } }
routes:
  - { name: jobs, match: { method: POST, path: /jobs }, upstream: api, idempotency: {} }
`,
    );
  }, 60_000);

  afterAll(async () => {
    await upstream?.close();
    for (const dir of [closed, tmpDir]) if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  const options = (env: NodeJS.ProcessEnv) => ({
    bin: path.join(checkout, 'dist', 'main.js'),
    cwd: checkout,
    env: { DATABASE_URL: '', TMPDIR: tmpDir, ...env },
  });

  test('a data dir inside the checkout: served from its place in the state dir, said in one line, no permission changed', async () => {
    const before = modesUpTo(checkout);
    const port = await findFreePort();
    const proxy = await startServe(
      ['--config', 'proxy.yaml'],
      options({ PROXY_PORT: String(port), IDEMPOTENCY_PROXY_STATE_DIR: stateDir }),
    );
    try {
      const placed = placeDataDir(path.join(checkout, '.data/postgres'), existingServerUser(), {
        IDEMPOTENCY_PROXY_STATE_DIR: stateDir,
      });
      expect(placed.blockedBy).toBe(closed);
      expect(path.dirname(placed.dataDir)).toBe(stateDir);
      expect(runningPostmaster(placed.dataDir)).toBeDefined();
      // check and the startup line name the real place, not the configured one.
      const check = await runCli(
        ['check', '--config', 'proxy.yaml'],
        options({ PROXY_PORT: '1', IDEMPOTENCY_PROXY_STATE_DIR: stateDir }),
      );
      expect(check.stdout).toContain(
        `store: embedded PostgreSQL at ${placed.dataDir} (store.dataDir ${path.join(checkout, '.data/postgres')} is out of the server user's reach)`,
      );
      expect(proxy.output()).toContain(`starting the embedded PostgreSQL in ${placed.dataDir}`);
      expect(proxy.output()).toContain(
        `cannot enter ${closed}: its data is in ${placed.dataDir} instead of ${checkout}/.data/postgres`,
      );
      expect((await postJson(`http://127.0.0.1:${port}/jobs`, 'root-placed', {})).status).toBe(201);
      // The operator commands find the running server through the same rule.
      const inspected = await runCli(
        ['inspect', 'root-placed', '--route', 'jobs', '--config', 'proxy.yaml'],
        options({ IDEMPOTENCY_PROXY_STATE_DIR: stateDir, PROXY_PORT: String(port) }),
      );
      expect(inspected.code).toBe(0);
      expect(inspected.stdout).toContain('completed');
    } finally {
      proxy.child.kill('SIGTERM');
      expect(await proxy.exited()).toBe(0);
    }
    expect(modesUpTo(checkout)).toEqual(before);
    expect(fs.existsSync(path.join(checkout, '.data/postgres/PG_VERSION'))).toBe(false);
  }, 90_000);

  test('a reachable data dir: serves from the checkout on a copy of the binaries, no permission changed', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'ip-root-pg-'));
    const before = modesUpTo(checkout);
    const port = await findFreePort();
    const proxy = await startServe(
      ['--config', 'proxy.yaml'],
      options({ PROXY_PORT: String(port), IDEMPOTENCY_PROXY_DATA_DIR: dataDir }),
    );
    try {
      const postmaster = runningPostmaster(dataDir)!;
      expect(fs.readlinkSync(`/proc/${postmaster.pid}/exe`).startsWith(tmpDir)).toBe(true);
      expect(fs.statSync(dataDir).uid).not.toBe(0); // owned by the server's user
      expect((await postJson(`http://127.0.0.1:${port}/jobs`, 'root-1', {})).status).toBe(201);
    } finally {
      proxy.child.kill('SIGTERM');
      expect(await proxy.exited()).toBe(0);
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
    expect(modesUpTo(checkout)).toEqual(before);
    expect(fs.statSync(closed).mode & 0o777).toBe(0o700);
  }, 60_000);
});
