// Wakes `onConcurrent: wait` requests when the record they wait on completes or is released, and
// relays operator clears to the replay cache. One
// dedicated connection LISTENs for the whole process (waiting holds no pool connection); it reconnects
// by itself, and after a reconnect wakes every waiter, since notifications sent meanwhile are lost.
// Waiters also poll (protected-request.ts), so a lost or impossible LISTEN (PgBouncer in transaction
// mode) only makes waking slower, never wrong.
import { Client } from 'pg';
import type { Logger } from 'pino';
import type { CompletionWaiter } from '../idempotency/record';

const RECONNECT_MIN_MS = 200;
const RECONNECT_MAX_MS = 5_000;

export interface ListenerStats {
  connected: boolean;
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
  readonly stats: ListenerStats = {
    connected: false,
    backendPid: undefined,
    notifications: 0,
    reconnects: 0,
    waiting: 0,
  };

  constructor(
    private readonly url: string,
    private readonly channel: string,
    private readonly logger: Logger,
    private readonly eviction?: EvictionSubscriber,
  ) {}

  /** Connects in the background; resolves once the first LISTEN is in place or has failed. */
  async start(): Promise<void> {
    await this.connect();
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
      connectionString: this.url,
      application_name: 'idempotency-proxy-listener',
      keepAlive: true,
    });
    client.on('notification', (message) => {
      if (message.payload === undefined) return;
      if (message.channel === this.eviction?.channel) return this.eviction.evict(message.payload);
      if (message.channel !== this.channel) return;
      this.stats.notifications++;
      this.wake(message.payload);
    });
    client.on('error', (error) => this.onLost(client, error));
    client.on('end', () => this.onLost(client, undefined));
    try {
      await client.connect();
      await client.query(`LISTEN "${this.channel}"`);
      if (this.eviction) await client.query(`LISTEN "${this.eviction.channel}"`);
    } catch (error) {
      this.onLost(client, error as Error);
      return;
    }
    if (this.closed) {
      await client.end().catch(() => undefined);
      return;
    }
    const wasReconnect = this.stats.reconnects > 0 || this.client !== undefined;
    this.client = client;
    this.stats.connected = true;
    this.stats.backendPid = (client as unknown as { processID?: number }).processID;
    this.eviction?.live(true);
    this.reconnectDelayMs = RECONNECT_MIN_MS;
    if (wasReconnect) this.wakeAll();
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
      { err: error },
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
