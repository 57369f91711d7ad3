// The writes that must land, and what keeps them: a completion whose client has (or will have) the
// answer, a release that lets a retry run, the release of a claim whose reply was lost. The key
// store makes each write's first attempt; one that failed comes here:
//
//   failed ─► outbox (memory) ─┬─ landed within the hold ─────────────────────► stored / stale
//                              └─ past the hold: the client gets its answer ─► spooled first
//                                   (appended to the spool and on disk), then sent again until it
//                                   lands; it leaves the spool once landed (or moot)
//
// Without a spool (store.outbox.spool: false) the outbox is all there is: past its bounds the oldest
// write is dropped, and a process that ends with writes queued loses them. With one, past the
// memory bound a spooled write's answer is let go from memory and read back from disk when it is
// sent (spilled); past the spool's own bound an answer is not handed out until it is stored, and
// new claims are refused (503) meanwhile: the proxy never gives an answer it cannot keep. At start,
// what the spool holds goes back into the outbox, and a key's writes land before the key is claimed
// again (key-store.ts). A write that lands twice (spooled, landed, then the process died before the
// removal reached the disk) finds itself stored and is done: every write is idempotent.
import { performance } from 'node:perf_hooks';
import type { Landing, RecordId, StoredResponse } from '../record';
import { recordText } from '../record';
import { type RecoveredEntry, Spool, type SpoolEntry } from '../spool';
import { within } from '../../timeout';
import { type AttemptResult, type OutboxWrite, type Settlement, WriteOutbox } from './write-outbox';

/**
 * A completion, the release of a claim whose forward reached nobody, or the release of a claim
 * whose statement's reply was lost (`release_claim`).
 */
export type WriteKind = 'complete' | 'release' | 'release_claim';

/** What a write carries: enough to send it again, in this process or (from the spool) the next. */
export type WriteData =
  | {
      readonly kind: 'complete';
      readonly id: RecordId;
      readonly fence: string;
      readonly response: StoredResponse;
      readonly ttlMs: number;
    }
  | { readonly kind: 'release' | 'release_claim'; readonly id: RecordId; readonly fence: string };

export interface PendingWrite extends OutboxWrite<WriteKind> {
  readonly id: RecordId;
  /** The claim token it writes under. */
  readonly fence: string;
}

/** How the key store sends a write once; `followUp` is made after a completion that lands. */
export type SendWrite = (
  data: WriteData,
  followUp?: () => Promise<unknown>,
) => Promise<AttemptResult>;

export interface OutboxSettings {
  /** Writes kept in memory at most; past it the oldest is dropped, or with a spool let go to disk. */
  readonly maxWrites: number;
  /** Bytes (answers' bodies and headers) kept in memory at most; past it likewise. */
  readonly maxBytes: number;
  /**
   * How long complete() and release() wait for a write whose first attempt failed before they
   * return `queued` (the outbox keeps trying).
   */
  readonly holdMs: number;
}

export const DEFAULT_OUTBOX: OutboxSettings = {
  maxWrites: 10_000,
  maxBytes: 64 * 1024 * 1024,
  holdMs: 2_000,
};

export interface WriteObserver {
  /** An attempt after the first. */
  retried?(write: PendingWrite): void;
  /** A write left the outbox: landed, stale (the token moved on), or dropped (with why). */
  settled?(write: PendingWrite, settlement: Settlement): void;
  /**
   * A completion replaced the unknown outcome another request had settled when its lease ended:
   * the record now holds the answer its client got.
   */
  replacedUnknown?(id: RecordId, status: number): void;
  /**
   * The spool could not take a write (full, or its disk failed): its answer waits until it is
   * stored, and new claims are refused meanwhile.
   */
  spoolRefused?(write: PendingWrite, error: unknown): void;
}

/** What a write held only in the spool keeps in memory. */
const SPILLED_BYTES = 256;

/** A write of this process: its data in memory, or (spilled, recovered) only in the spool. */
class Write implements PendingWrite {
  readonly key: string;
  bytes: number;
  /** Its seq in the spool, once appended there. */
  spooled: number | undefined;
  /** It has left the outbox (landed, moot or dropped): its spool entry may go. */
  done = false;

  constructor(
    readonly kind: WriteKind,
    readonly id: RecordId,
    readonly fence: string,
    readonly expiresAt: number,
    /** Undefined once spilled: read back from the spool. */
    public data: WriteData | undefined,
    private readonly send: (write: Write) => Promise<AttemptResult>,
  ) {
    this.key = recordText(id);
    this.bytes = data === undefined ? SPILLED_BYTES : dataBytes(data);
  }

  attempt(): Promise<AttemptResult> {
    return this.send(this);
  }
}

export interface PendingWritesOptions extends OutboxSettings {
  /** Whether a failed attempt may succeed later; a write whose attempt fails otherwise is dropped. */
  readonly retryable: (error: unknown) => boolean;
  readonly observer?: WriteObserver;
  /** Where writes past the hold are kept on disk (store.outbox.spool); none: memory only. */
  readonly spool?: Spool;
}

export class PendingWrites {
  private readonly outbox: WriteOutbox<Write>;
  private readonly spool: Spool | undefined;
  /** Answers waiting to be stored because the spool could not take them: claims are refused. */
  private unkept = 0;
  /** Follow-ups of completions, kept in memory only (a spooled write read back has none). */
  private readonly followUps = new WeakMap<Write, () => Promise<unknown>>();

  constructor(
    private readonly sendWrite: SendWrite,
    private readonly options: PendingWritesOptions,
  ) {
    this.spool = options.spool;
    const observer = options.observer;
    this.outbox = new WriteOutbox<Write>({
      maxWrites: options.maxWrites,
      maxBytes: options.maxBytes,
      retryable: options.retryable,
      onRetry: observer?.retried?.bind(observer),
      onSettled: (write, settlement) => {
        write.done = true;
        // A write the proxy stopped with stays in the spool, for the next start to land.
        if (write.spooled !== undefined && !isShutdown(settlement))
          this.spool?.remove(write.spooled);
        observer?.settled?.(write, settlement);
      },
      spill: this.spool && ((write) => this.spill(write)),
    });
  }

  /**
   * Puts back what the spool held at start (a crash, or a stop with writes queued): each is sent
   * again, and lands before its key is claimed (sendPendingOf).
   */
  recover(entries: readonly RecoveredEntry[]): number {
    let recovered = 0;
    for (const { seq, entry } of entries) {
      const header = spooledHeader(entry);
      if (header === undefined) {
        this.spool?.remove(seq); // not ours to read: an entry of another version, or damaged
        continue;
      }
      const write = this.write(header.kind, header.id, header.fence, header.expiresAt, undefined);
      write.spooled = seq;
      void this.outbox.add(write, 0);
      recovered++;
    }
    return recovered;
  }

  /** Writes waiting to land. */
  get size(): number {
    return this.outbox.size;
  }

  get pending(): { readonly writes: number; readonly bytes: number } {
    return this.outbox.pending;
  }

  /**
   * True while an answer waits because the spool could not take it: a new claim would only add an
   * answer the proxy cannot keep.
   */
  get refusingClaims(): boolean {
    return this.unkept > 0;
  }

  holds(key: string): boolean {
    return this.outbox.holds(key);
  }

  sendNow(key: string): Promise<void> {
    return this.outbox.sendNow(key);
  }

  wake(): void {
    this.outbox.wake();
  }

  /**
   * Takes a write whose first attempt failed and waits for it up to the hold: what it became, or
   * `queued` while it is kept trying (on disk first, with a spool). A write the outbox had to drop
   * in that time fails with the first attempt's error (or its own).
   */
  async hold(
    error: unknown,
    data: WriteData,
    expiresAt: number,
    followUp?: () => Promise<unknown>,
  ): Promise<Landing> {
    const write = this.write(data.kind, data.id, data.fence, expiresAt, data);
    if (followUp) this.followUps.set(write, followUp);
    const settled = this.outbox.add(write);
    const first = await within(settled, this.options.holdMs, () => 'held' as const);
    const settlement = first === 'held' ? await this.keep(write, settled) : first;
    if (settlement === 'queued') return 'queued';
    if (settlement.kind === 'landed') return 'stored';
    if (settlement.kind === 'stale') return 'stale';
    throw settlement.error ?? error;
  }

  /** Takes a write no attempt was made of yet (a lost claim's release): not held, not spooled. */
  later(data: WriteData, expiresAt: number): void {
    void this.outbox.add(this.write(data.kind, data.id, data.fence, expiresAt, data), 0);
  }

  /**
   * Sends what is pending until it has landed or `timeoutMs` has passed (shutdown); returns what is
   * left. Spooled writes stay in the spool for the next start (`kept`); the rest are given up.
   */
  async drain(timeoutMs: number): Promise<{ kept: PendingWrite[]; lost: PendingWrite[] }> {
    const left = await this.outbox.drain(timeoutMs);
    const kept = left.filter((write) => write.spooled !== undefined);
    const lost = left.filter((write) => write.spooled === undefined);
    await this.spool?.close();
    return { kept, lost };
  }

  /**
   * A write past the hold: its client is about to get the answer. With a spool it is on disk
   * before that; one the spool cannot take is waited for until it lands instead.
   */
  private async keep(write: Write, settled: Promise<Settlement>): Promise<Settlement | 'queued'> {
    if (this.spool === undefined || write.kind === 'release_claim') return 'queued';
    try {
      write.spooled = await this.spool.append(spoolEntryOf(write.data!, write.expiresAt));
    } catch (error) {
      this.options.observer?.spoolRefused?.(write, error);
      this.unkept++;
      try {
        return await settled;
      } finally {
        this.unkept--;
      }
    }
    // It may have landed while it was being written.
    if (write.done) this.spool.remove(write.spooled);
    else this.outbox.rebound();
    return 'queued';
  }

  /** Past the memory bound: a spooled write's answer leaves memory; one not on disk yet stays. */
  private spill(write: Write): number | 'keep' {
    if (write.spooled === undefined) return 'keep';
    if (write.data !== undefined) {
      write.data = undefined;
      this.followUps.delete(write); // made only by this process's own attempt, never from disk
      write.bytes = SPILLED_BYTES;
    }
    return write.bytes;
  }

  private write(
    kind: WriteKind,
    id: RecordId,
    fence: string,
    expiresAt: number,
    data: WriteData | undefined,
  ): Write {
    return new Write(kind, id, fence, expiresAt, data, (write) => this.attempt(write));
  }

  private async attempt(write: Write): Promise<AttemptResult> {
    const data = write.data ?? dataOf(await this.spool!.read(write.spooled!));
    return this.sendWrite(data, this.followUps.get(write));
  }
}

function isShutdown(settlement: Settlement): boolean {
  return settlement.kind === 'dropped' && settlement.reason === 'shutdown';
}

/** What a write holds in memory: its bodies and headers, and about as much again for the rest. */
function dataBytes(data: WriteData): number {
  if (data.kind !== 'complete') return SPILLED_BYTES;
  const { response } = data;
  let bytes = response.body.length + 256;
  for (const [name, value] of response.headers) bytes += name.length + value.length;
  const partial = response.partial;
  if (partial === undefined) return bytes;
  bytes += partial.body.length;
  for (const [name, value] of partial.headers) bytes += name.length + value.length;
  return bytes;
}

// ---- the spool's entries ----------------------------------------------------------------------
// meta: { v: 1, kind, scope, tenant, key, fence, expires (epoch ms, or null: never),
//         and for a completion ttlMs, status, headers, bodyOmitted, outcomeUnknown, partial? }
// blobs: a completion's body, then its partial answer's body when it has one.
// Expiry is kept as wall-clock time: performance.now() means nothing to the next process.

const SPOOL_VERSION = 1;

interface SpooledMeta {
  readonly v: number;
  readonly kind: WriteKind;
  readonly scope: string;
  readonly tenant: string;
  readonly key: string;
  readonly fence: string;
  readonly expires: number | null;
  readonly ttlMs?: number;
  readonly status?: number;
  readonly headers?: [string, string][];
  readonly bodyOmitted?: boolean;
  readonly outcomeUnknown?: boolean;
  readonly partial?: { status: number; headers: [string, string][]; bytes: number };
}

function spoolEntryOf(data: WriteData, expiresAt: number): SpoolEntry {
  const { id } = data;
  const head = {
    v: SPOOL_VERSION,
    kind: data.kind,
    scope: id.scope,
    tenant: id.tenant,
    key: id.key,
    fence: data.fence,
    expires: Number.isFinite(expiresAt) ? Date.now() + (expiresAt - performance.now()) : null,
  };
  if (data.kind !== 'complete') return { meta: head, blobs: [] };
  const { response } = data;
  const partial = response.partial;
  const meta: SpooledMeta = {
    ...head,
    ttlMs: data.ttlMs,
    status: response.status,
    headers: response.headers.map(([name, value]) => [name, value]),
    bodyOmitted: response.bodyOmitted,
    outcomeUnknown: response.outcomeUnknown,
    ...(partial && {
      partial: {
        status: partial.status,
        headers: partial.headers.map(([name, value]) => [name, value] as [string, string]),
        bytes: partial.bytes,
      },
    }),
  };
  return { meta, blobs: partial ? [response.body, partial.body] : [response.body] };
}

/** What a recovered entry is about, or undefined when it is not an entry this version wrote. */
function spooledHeader(
  entry: SpoolEntry,
): { kind: WriteKind; id: RecordId; fence: string; expiresAt: number } | undefined {
  const meta = entry.meta as Partial<SpooledMeta> | null;
  if (meta?.v !== SPOOL_VERSION) return undefined;
  const { kind, scope, tenant, key, fence, expires } = meta;
  if (kind !== 'complete' && kind !== 'release' && kind !== 'release_claim') return undefined;
  if (typeof scope !== 'string' || typeof tenant !== 'string' || typeof key !== 'string')
    return undefined;
  if (typeof fence !== 'string') return undefined;
  const expiresAt =
    typeof expires === 'number' ? performance.now() + (expires - Date.now()) : Infinity;
  return { kind, id: { scope, tenant, key }, fence, expiresAt };
}

/** A spooled entry as the write it was (its header checked by spooledHeader when recovered). */
function dataOf(entry: SpoolEntry): WriteData {
  const meta = entry.meta as SpooledMeta;
  const id = { scope: meta.scope, tenant: meta.tenant, key: meta.key };
  if (meta.kind !== 'complete') return { kind: meta.kind, id, fence: meta.fence };
  const [body = Buffer.alloc(0), partialBody] = entry.blobs;
  const response: StoredResponse = {
    status: meta.status!,
    headers: meta.headers!,
    body,
    bodyOmitted: meta.bodyOmitted!,
    outcomeUnknown: meta.outcomeUnknown!,
    ...(meta.partial && partialBody && { partial: { ...meta.partial, body: partialBody } }),
  };
  return { kind: 'complete', id, fence: meta.fence, response, ttlMs: meta.ttlMs! };
}
