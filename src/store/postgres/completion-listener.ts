// Wakes `onConcurrent: wait` requests when the record they wait on completes or is released, and
// relays operator clears to the replay cache. One dedicated connection LISTENs for the whole
// process (waiting holds no pool connection); it reconnects by itself, and after a reconnect wakes
// every waiter, since notifications sent meanwhile are lost. Waiters also poll
// (coalescing-store.ts), so a lost or impossible LISTEN only makes waking slower, never wrong.
//
// The replay cache is another matter: an entry is only as good as the clears this connection
// hears, so the connection must be proven to deliver, not merely open. A connection can fail
// without a word (a half-open TCP after a NAT or firewall drops it, a frozen path): the OS notices
// after its keepalive gives up, if ever. So, as pg-boss's listen heartbeat does:
//
//   connect ── LISTEN ── proof: another session NOTIFYs, it must arrive ─► proven: cache on
//      ▲                                                                      │
//      │          probeIntervalMs after the last probe was sent (once it ended): ▼
//      │                  NOTIFY ourselves on this connection, raced against probeTimeoutMs
//      │                     arrived in time ─► still proven, next probe in probeIntervalMs
//      └── reconnect ◄────── late, or failed ─► cache off (and emptied), connection dropped
//
// The first proof uses another session: behind a transaction pooler (PgBouncer in transaction
// mode) a LISTEN stays on whichever server connection ran it, and an idle client has none, so
// nothing another session sends is ever delivered, while a NOTIFY from the same client could be.
// Then the listener polls only, and tries again much later. Once proven, the connection's own
// NOTIFY is enough: its arrival means the connection carries both ways, and PostgreSQL delivers
// notifications in commit order, so every clear committed before the probe was sent has arrived.
// A clear is therefore heard, or the cache turned off, at most probeIntervalMs + probeTimeoutMs
// after it commits (docs/store-topologies.md).
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { Client } from 'pg';
import type { Logger } from 'pino';
import type { CompletionWaiter } from '../record';
import type { StoreConnection } from '../../db/pool';
import { databaseErrorFields, serverAddress } from '../../db/store-failure';
import { within } from '../../timeout';

const RECONNECT_MIN_MS = 200;
const RECONNECT_MAX_MS = 5_000;
/** After a first proof that never arrived (a transaction pooler), how long until LISTEN is tried again. */
const POLL_ONLY_RETRY_MS = 60_000;
const PROBE_PREFIX = 'probe:';
/** How long start() waits for the first LISTEN to be proved before the proxy serves anyway. */
const START_WAIT_MS = 500;
/** How long connecting, and each LISTEN, may take before the attempt counts as failed. */
const CONNECT_TIMEOUT_MS = 10_000;
/**
 * TCP keepalive on the listener's connection, set rather than left to the OS (often two hours):
 * idle this long, the kernel probes the peer (every second, ten times: libuv's settings) and
 * closes a connection nobody answers for. The heartbeat finds a silent connection sooner; this
 * covers the time its timers cannot run (a stalled event loop).
 */
const KEEPALIVE_IDLE_MS = 10_000;

/** How the LISTEN connection is proven alive (store.listenProbeInterval, store.listenProbeTimeout). */
export interface ListenerProbe {
  /** Time between the end of one probe and the start of the next. */
  readonly intervalMs: number;
  /** How long a probe NOTIFY may take to come back before the connection counts as lost. */
  readonly timeoutMs: number;
}

export const DEFAULT_LISTENER_PROBE: ListenerProbe = { intervalMs: 5_000, timeoutMs: 2_000 };

export interface ListenerStats {
  connected: boolean;
  /**
   * True while notifications are known not to arrive (a probe NOTIFY never did: a transaction
   * pooler), so waiters rely on polling alone.
   */
  polling: boolean;
  /** The listening connection's server process id (pg_stat_activity.pid), while connected. */
  backendPid: number | undefined;
  notifications: number;
  reconnects: number;
  waiting: number;
  /** performance.now() when a probe last came back in time; undefined while not proven. */
  provenAt: number | undefined;
  /** Probes (the first proof included) that did not come back in time, or failed. */
  probeFailures: number;
  /** Why the connection is not proven right now (for /readyz); undefined while it is. */
  unproven: string | undefined;
}

/** Receives operator clears (for the replay cache) over the same connection. */
export interface EvictionSubscriber {
  readonly channel: string;
  evict(digest: string): void;
  /** False while clears cannot be known to arrive: the cache must not answer then. */
  live(proven: boolean): void;
}

export class CompletionListener implements CompletionWaiter {
  private readonly waiters = new Map<string, Set<() => void>>();
  private client: Client | undefined;
  private closed = false;
  private reconnectDelayMs = RECONNECT_MIN_MS;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private probeTimer: NodeJS.Timeout | undefined;
  private probe: { payload: string; arrived(): void } | undefined;
  /** Told whenever the connection is lost or a connect fails: PostgreSQL may be away. */
  private lostListener: (() => void) | undefined;
  readonly stats: ListenerStats = {
    connected: false,
    polling: false,
    backendPid: undefined,
    notifications: 0,
    reconnects: 0,
    waiting: 0,
    provenAt: undefined,
    probeFailures: 0,
    unproven: 'connecting',
  };

  constructor(
    /** The store's URL and TLS, as the pool's (db/pool.ts storeConnection). */
    private readonly connection: StoreConnection,
    private readonly channel: string,
    private readonly logger: Logger,
    private readonly eviction?: EvictionSubscriber,
    private readonly probing: ListenerProbe = DEFAULT_LISTENER_PROBE,
  ) {}

  /**
   * Connects in the background; resolves once the first LISTEN is proved delivered or has failed,
   * or after START_WAIT_MS: behind a transaction pooler the proof takes probeTimeoutMs to fail,
   * and serving meanwhile is fine (waiters poll, the replay cache is off until the proof).
   */
  async start(): Promise<void> {
    await within(this.connect(), START_WAIT_MS, () => undefined);
  }

  /**
   * `listener` is called whenever the LISTEN connection is lost or a connect attempt fails (every
   * few seconds while PostgreSQL is away): an instance with no traffic knows of an outage so.
   */
  whenLost(listener: () => void): void {
    this.lostListener = listener;
  }

  waitFor(digest: string): { changed: Promise<void>; cancel(): void } {
    let wake!: () => void;
    const changed = new Promise<void>((resolve) => (wake = resolve));
    let set = this.waiters.get(digest);
    if (!set) this.waiters.set(digest, (set = new Set()));
    set.add(wake);
    this.stats.waiting++;
    return {
      changed,
      cancel: () => {
        const current = this.waiters.get(digest);
        if (!current?.delete(wake)) return;
        this.stats.waiting--;
        if (current.size === 0) this.waiters.delete(digest);
      },
    };
  }

  async close(): Promise<void> {
    this.closed = true;
    this.unprove('closed');
    clearTimeout(this.reconnectTimer);
    clearTimeout(this.probeTimer);
    const client = this.client;
    this.client = undefined;
    this.wakeAll();
    await client?.end().catch(() => undefined);
  }

  private async connect(): Promise<void> {
    if (this.closed) return;
    const client = new Client({
      ...this.connection,
      application_name: 'idempotency-proxy-listener',
      keepAlive: true,
      keepAliveInitialDelayMillis: KEEPALIVE_IDLE_MS,
      connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
    });
    client.on('notification', (message) => {
      if (message.payload === undefined) return;
      if (message.channel === this.eviction?.channel) return this.eviction.evict(message.payload);
      if (message.channel !== this.channel) return;
      if (message.payload.startsWith(PROBE_PREFIX)) {
        // Ours proves delivery; another instance's probe means nothing here.
        if (message.payload === this.probe?.payload) this.probe.arrived();
        return;
      }
      this.stats.notifications++;
      this.wake(message.payload);
    });
    let lost = false;
    client.on('error', (error) => {
      lost = true;
      this.onLost(client, error);
    });
    client.on('end', () => {
      lost = true;
      this.onLost(client, undefined);
    });
    let delivered: boolean;
    let proofSentAt: number;
    try {
      await client.connect();
      await withinOrFail(client.query(`LISTEN "${this.channel}"`), CONNECT_TIMEOUT_MS, 'LISTEN');
      if (this.eviction)
        await withinOrFail(
          client.query(`LISTEN "${this.eviction.channel}"`),
          CONNECT_TIMEOUT_MS,
          'LISTEN',
        );
      proofSentAt = performance.now();
      delivered = await this.proveFromAnotherSession();
    } catch (error) {
      this.onLost(client, error as Error);
      return;
    }
    if (lost) return; // onLost has scheduled the next attempt
    if (this.closed) {
      await client.end().catch(() => undefined);
      return;
    }
    if (!delivered) return this.pollOnly(client);
    // Notifications sent while no LISTEN was delivered are lost: every waiter reads its record again.
    const wasReconnect =
      this.stats.reconnects > 0 || this.client !== undefined || this.stats.polling;
    this.client = client;
    this.stats.connected = true;
    this.stats.backendPid = (client as unknown as { processID?: number }).processID;
    // Once at startup, so an operator sees the listener's own connection (its TLS included) work.
    if (this.stats.polling) this.logger.info('completion listener: LISTEN is delivered again');
    else if (!wasReconnect)
      this.logger.info(
        { backendPid: this.stats.backendPid },
        'completion listener: LISTEN is delivered',
      );
    this.stats.polling = false;
    this.proven();
    this.reconnectDelayMs = RECONNECT_MIN_MS;
    this.scheduleProbe(client, proofSentAt);
    if (wasReconnect) this.wakeAll();
  }

  /**
   * NOTIFYs a probe on the channel from a session of its own and waits for it to arrive here. A
   * direct connection or PgBouncer in session mode delivers it; in transaction mode it is lost.
   */
  private async proveFromAnotherSession(): Promise<boolean> {
    const sender = new Client({
      ...this.connection,
      application_name: 'idempotency-proxy-listener-probe',
      connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
    });
    sender.on('error', () => undefined);
    try {
      await sender.connect();
      return await this.probeVia(sender);
    } finally {
      await sender.end().catch(() => undefined);
    }
  }

  /**
   * Sends a probe NOTIFY through `via` and waits for it to arrive on the listening connection, at
   * most probeTimeoutMs from its sending: true when it did. A statement that fails rejects.
   */
  private async probeVia(via: Client): Promise<boolean> {
    const payload = `${PROBE_PREFIX}${randomUUID()}`;
    const arrived = new Promise<boolean>((resolve) => {
      this.probe = { payload, arrived: () => resolve(true) };
    });
    try {
      const sent = via.query('SELECT pg_notify($1::text, $2::text)', [this.channel, payload]);
      // A statement that hangs (a frozen connection) is the timeout's to answer, not an error.
      sent.catch(() => undefined);
      const answered = Promise.race([arrived, sent.then(() => arrived)]);
      return await within(answered, this.probing.timeoutMs, () => false, true);
    } finally {
      // A reconnect's proof may have started meanwhile: that probe is not ours to forget.
      if (this.probe?.payload === payload) this.probe = undefined;
    }
  }

  /**
   * The heartbeat: one probe at a time, the next only once the last has ended (a chained timer, no
   * pile-up), and probeIntervalMs after the last one was sent: a probe that arrived proves every
   * clear committed before its sending, so a clear is heard or the cache off within
   * probeIntervalMs + probeTimeoutMs of its commit, however long that probe took.
   */
  private scheduleProbe(client: Client, lastSentAt: number): void {
    clearTimeout(this.probeTimer);
    const delayMs = Math.max(0, lastSentAt + this.probing.intervalMs - performance.now());
    this.probeTimer = setTimeout(() => void this.heartbeat(client), delayMs);
    this.probeTimer.unref();
  }

  private async heartbeat(client: Client): Promise<void> {
    if (this.closed || this.client !== client) return;
    let delivered: boolean;
    let failure: unknown;
    const sentAt = performance.now();
    try {
      delivered = await this.probeVia(client);
    } catch (error) {
      delivered = false;
      failure = error;
    }
    if (this.closed || this.client !== client) return;
    if (delivered) {
      this.proven();
      return this.scheduleProbe(client, sentAt);
    }
    // Off at once: a clear may be committed and not heard. The connection goes, and a new one
    // must pass the first proof again before the cache is back.
    this.stats.probeFailures++;
    const error =
      failure === undefined
        ? new Error(`no answer to a probe NOTIFY within ${this.probing.timeoutMs} ms`)
        : (failure as Error);
    this.onLost(
      client,
      error,
      `the LISTEN connection failed a probe (${error.message}); reconnecting`,
    );
  }

  /** A probe came back in time: clears arrive, the cache may answer. */
  private proven(): void {
    this.stats.provenAt = performance.now();
    this.stats.unproven = undefined;
    this.eviction?.live(true);
  }

  /** Clears may not arrive: the cache is off (and emptied) until the next proof. */
  private unprove(reason: string): void {
    this.stats.provenAt = undefined;
    this.stats.unproven = reason;
    this.eviction?.live(false);
  }

  /**
   * LISTEN is not delivered: drop the connection (and the LISTEN with it, where it can), let waiters
   * poll and keep the replay cache off, and try again much later.
   */
  private pollOnly(client: Client): void {
    if (!this.stats.polling) {
      this.logger.warn(
        { probeTimeoutMs: this.probing.timeoutMs, retryMs: POLL_ONLY_RETRY_MS },
        'completion listener: LISTEN is not delivered on this database URL (a transaction pooler such as PgBouncer in transaction mode?); onConcurrent: wait polls instead, and the replay cache stays off',
      );
    }
    this.stats.polling = true;
    this.stats.connected = false;
    this.stats.backendPid = undefined;
    this.stats.probeFailures++;
    this.unprove('LISTEN is not delivered on this database URL (a transaction pooler?)');
    client.removeAllListeners('end');
    client.removeAllListeners('error');
    client.on('error', () => undefined);
    void client
      .query('UNLISTEN *')
      .catch(() => undefined)
      .finally(() => client.end().catch(() => undefined));
    if (this.closed || this.reconnectTimer) return;
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = undefined;
      void this.connect();
    }, POLL_ONLY_RETRY_MS);
    this.reconnectTimer.unref();
  }

  private onLost(
    client: Client,
    error: Error | undefined,
    reason = 'the LISTEN connection was lost; reconnecting',
  ): void {
    if (this.client !== undefined && this.client !== client) return;
    if (this.client === client) {
      this.client = undefined;
      clearTimeout(this.probeTimer);
    }
    this.stats.connected = false;
    this.stats.backendPid = undefined;
    this.lostListener?.();
    this.unprove(reason);
    client.removeAllListeners('end');
    client.removeAllListeners('error');
    client.on('error', () => undefined);
    // Ends it, or destroys its socket when a statement hangs on it (pg's end()).
    client.end().catch(() => undefined);
    if (this.closed || this.reconnectTimer) return;
    this.logger.warn(
      databaseErrorFields(
        error ?? 'the connection ended',
        serverAddress(this.connection.connectionString),
      ),
      'completion listener lost its connection; the replay cache is off and waiters poll until it is back',
    );
    this.stats.reconnects++;
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = undefined;
      void this.connect();
    }, this.reconnectDelayMs);
    this.reconnectTimer.unref();
    this.reconnectDelayMs = Math.min(RECONNECT_MAX_MS, this.reconnectDelayMs * 2);
  }

  private wake(digest: string): void {
    const set = this.waiters.get(digest);
    if (!set) return;
    for (const wake of set) wake();
  }

  private wakeAll(): void {
    for (const set of this.waiters.values()) for (const wake of set) wake();
  }
}

/** `work`, or a rejection once `ms` have passed without it settling. */
function withinOrFail<T>(work: Promise<T>, ms: number, what: string): Promise<T> {
  return within(work, ms, () => {
    throw new Error(`${what} took longer than ${ms} ms`);
  });
}
