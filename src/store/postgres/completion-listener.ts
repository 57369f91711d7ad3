// Wakes `onConcurrent: wait` requests when the record they wait on completes or is released, and
// relays operator clears to the replay cache. One
// dedicated connection LISTENs for the whole process (waiting holds no pool connection); it reconnects
// by itself, and after a reconnect wakes every waiter, since notifications sent meanwhile are lost.
// Waiters also poll (coalescing-store.ts), so a lost or impossible LISTEN only makes waking slower,
// never wrong. Impossible: behind a transaction pooler (PgBouncer in transaction mode) a LISTEN stays
// on whichever server connection ran it, and an idle client has none, so nothing is ever delivered.
// Every connect therefore proves delivery: another session NOTIFYs a probe, and until it arrives the
// listener does not count as connected (the replay cache stays off, waiters poll).
import { randomUUID } from 'node:crypto';
import { Client } from 'pg';
import type { Logger } from 'pino';
import type { CompletionWaiter } from '../record';
import type { StoreConnection } from '../../db/pool';
import { databaseErrorFields, serverAddress } from '../../db/store-failure';

const RECONNECT_MIN_MS = 200;
const RECONNECT_MAX_MS = 5_000;
/** How long a probe NOTIFY may take to arrive before LISTEN counts as not delivered. */
const PROBE_TIMEOUT_MS = 2_000;
/** After a probe that never arrived, how long until LISTEN is tried again. */
const PROBE_RETRY_MS = 60_000;
const PROBE_PREFIX = 'probe:';
/** How long start() waits for the first LISTEN to be proved before the proxy serves anyway. */
const START_WAIT_MS = 500;

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
}

/** Receives operator clears (for the replay cache) over the same connection. */
export interface EvictionSubscriber {
  readonly channel: string;
  evict(digest: string): void;
  /** False while clears cannot be heard: the cache must not answer then. */
  live(connected: boolean): void;
}

export class CompletionListener implements CompletionWaiter {
  private readonly waiters = new Map<string, Set<() => void>>();
  private client: Client | undefined;
  private closed = false;
  private reconnectDelayMs = RECONNECT_MIN_MS;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private probe: { payload: string; arrived(): void } | undefined;
  readonly stats: ListenerStats = {
    connected: false,
    polling: false,
    backendPid: undefined,
    notifications: 0,
    reconnects: 0,
    waiting: 0,
  };

  constructor(
    /** The store's URL and TLS, as the pool's (db/pool.ts storeConnection). */
    private readonly connection: StoreConnection,
    private readonly channel: string,
    private readonly logger: Logger,
    private readonly eviction?: EvictionSubscriber,
  ) {}

  /**
   * Connects in the background; resolves once the first LISTEN is proved delivered or has failed,
   * or after START_WAIT_MS: behind a transaction pooler the probe takes PROBE_TIMEOUT_MS to fail,
   * and serving meanwhile is fine (waiters poll, the replay cache is off until the proof).
   */
  async start(): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const waited = new Promise<void>((resolve) => (timer = setTimeout(resolve, START_WAIT_MS)));
    await Promise.race([this.connect(), waited]);
    clearTimeout(timer);
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
    this.eviction?.live(false);
    clearTimeout(this.reconnectTimer);
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
    try {
      await client.connect();
      await client.query(`LISTEN "${this.channel}"`);
      if (this.eviction) await client.query(`LISTEN "${this.eviction.channel}"`);
      delivered = await this.probeDelivery();
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
    this.eviction?.live(true);
    this.reconnectDelayMs = RECONNECT_MIN_MS;
    if (wasReconnect) this.wakeAll();
  }

  /**
   * NOTIFYs a probe on the channel from a session of its own and waits for it to arrive here. A
   * direct connection or PgBouncer in session mode delivers it; in transaction mode it is lost.
   */
  private async probeDelivery(): Promise<boolean> {
    const payload = `${PROBE_PREFIX}${randomUUID()}`;
    let timer: NodeJS.Timeout | undefined;
    const arrived = new Promise<boolean>((resolve) => {
      this.probe = { payload, arrived: () => resolve(true) };
      timer = setTimeout(() => resolve(false), PROBE_TIMEOUT_MS);
      timer.unref();
    });
    const sender = new Client({
      ...this.connection,
      application_name: 'idempotency-proxy-listener-probe',
    });
    sender.on('error', () => undefined);
    try {
      await sender.connect();
      await sender.query('SELECT pg_notify($1::text, $2::text)', [this.channel, payload]);
      return await arrived;
    } finally {
      clearTimeout(timer);
      this.probe = undefined;
      await sender.end().catch(() => undefined);
    }
  }

  /**
   * LISTEN is not delivered: drop the connection (and the LISTEN with it, where it can), let waiters
   * poll and keep the replay cache off, and try again much later.
   */
  private pollOnly(client: Client): void {
    if (!this.stats.polling) {
      this.logger.warn(
        { probeTimeoutMs: PROBE_TIMEOUT_MS, retryMs: PROBE_RETRY_MS },
        'completion listener: LISTEN is not delivered on this database URL (a transaction pooler such as PgBouncer in transaction mode?); onConcurrent: wait polls instead, and the replay cache stays off',
      );
    }
    this.stats.polling = true;
    this.stats.connected = false;
    this.stats.backendPid = undefined;
    this.eviction?.live(false);
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
    }, PROBE_RETRY_MS);
    this.reconnectTimer.unref();
  }

  private onLost(client: Client, error: Error | undefined): void {
    if (this.client !== undefined && this.client !== client) return;
    if (this.client === client) this.client = undefined;
    this.stats.connected = false;
    this.stats.backendPid = undefined;
    this.eviction?.live(false);
    client.removeAllListeners('end');
    client.end().catch(() => undefined);
    if (this.closed || this.reconnectTimer) return;
    this.logger.warn(
      databaseErrorFields(
        error ?? 'the connection ended',
        serverAddress(this.connection.connectionString),
      ),
      'completion listener lost its connection; waiters poll until it is back',
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
