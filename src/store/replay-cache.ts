// An in-process cache of completed records, so a replay (or a 422 for a reused key) needs no round
// trip. It answers only what the database would answer the same request:
// - entries are keyed by memoryKey (record.ts): the record and the fingerprint policy the request
//   was fingerprinted under, so routes of one group that fingerprint differently never share an
//   answer, and a reload drops the entries of policies no longer in force (keepPolicies);
// - a completed record never changes; it only expires, or is cleared by an operator. An entry ends
//   no later than the database's expires_at (counted from before the statement was sent, below),
//   and a clear evicts it: locally before the admin API answers, and on every other instance when
//   the clear's NOTIFY arrives. That LISTEN connection is proven alive by a periodic probe
//   (completion-listener.ts); while it is not, the cache is off (setLive, the one switch) and empty.
// - a record read from the database before an eviction (a clear, the cache switched off, a reload)
//   is not admitted after it: `asked()` is taken before the statement, `remember` compares.
//
//   expiry, in this process's clock:
//     asked() ── statement sent ── PostgreSQL's now() ──────────────── expires_at
//     at                           └── expires_in_ms (from the row) ──┘
//     at ──────────────────────── at + expires_in_ms ──┘ (≤ expires_at: now() came after `at`)
//
// The store the request path talks to owns it (coalescing-store.ts), and counts its hits there.
import { performance } from 'node:perf_hooks';
import { type RecordId, recordDigest, type StoredResponse } from './record';

/**
 * An entry's life is cut by this share of it: the database's clock and this process's may run at
 * rates apart by up to 1000 ppm (NTP slews each by at most 500 ppm).
 */
const CLOCK_RATE_SLACK = 0.001;
/** What an entry costs beyond its body and headers (Map slot, objects, digest, fingerprint), measured. */
const ENTRY_OVERHEAD_BYTES = 1_024;
/** Records whose body is larger than this share of the cache are not cached. */
const MAX_ENTRY_SHARE = 0.1;
/** Raw fingerprints (fingerprint.ts) remembered per entry: the spellings of one body seen so far. */
const MAX_RAW_FINGERPRINTS = 4;

interface Entry {
  /** The record's NOTIFY identity, for evictions (computed once, when the entry is admitted). */
  readonly digest: string;
  /** The fingerprint policy (config/types.ts fingerprintEpoch) the entry was admitted under. */
  readonly epoch: string;
  readonly fingerprint: Buffer;
  /** Raw fingerprints of large bodies known to have `fingerprint`: a repeat matching one needs no canonical JSON. */
  readonly raws: Buffer[];
  readonly response: StoredResponse;
  readonly expiresAt: number;
  bytes: number;
}

export type CacheLookup =
  | { readonly kind: 'replay'; readonly response: StoredResponse }
  | { readonly kind: 'mismatch' }
  | undefined;

/** Taken before a claim is sent: when, and how many evictions the cache had seen. */
export interface Asked {
  readonly at: number;
  readonly generation: number;
}

/** A completed record as a claim found it in the database. */
export interface Admission {
  readonly id: RecordId;
  /** The request's fingerprint policy (config/types.ts fingerprintEpoch). */
  readonly epoch: string;
  readonly fingerprint: Buffer;
  readonly response: StoredResponse;
  /** expires_at less the claim statement's now(), as PostgreSQL computed it. */
  readonly expiresInMs: number;
  /** The request's raw fingerprint, when it has one. */
  readonly raw?: Buffer | undefined;
}

/**
 * Entries are keyed by memoryKey (a string join, no hashing on the request path); the SHA-256 digest
 * that clears arrive with is computed once per admitted entry and indexed on the side (one record
 * may have an entry per fingerprint policy that asked for it).
 */
export class ReplayCache {
  private readonly entries = new Map<string, Entry>();
  private readonly byDigest = new Map<string, Set<string>>();
  private bytes = 0;
  private on = false;
  /** Counts evictions of any kind; a claim asked before one is not admitted after it. */
  private generation = 0;
  /** The fingerprint policies in force (keepPolicies); undefined: any. */
  private policies: ReadonlySet<string> | undefined;

  constructor(
    private readonly maxBytes: number,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /**
   * Whether clears can reach this instance (its LISTEN connection is proven alive); the cache is
   * off, and empty, otherwise. The only switch.
   */
  setLive(live: boolean): void {
    if (live !== this.on) this.clear();
    this.on = live;
  }

  get live(): boolean {
    return this.on;
  }

  /** Taken before a claim is sent; `remember` admits what the claim found only against it. */
  asked(): Asked {
    return { at: this.now(), generation: this.generation };
  }

  /**
   * Answers a repeat from memory; undefined = ask the database. `raw`, the request's raw
   * fingerprint when it has one, is remembered on a replay.
   */
  lookup(key: string, fingerprint: Buffer, raw?: Buffer): CacheLookup {
    const entry = this.entry(key);
    if (!entry) return undefined;
    if (!entry.fingerprint.equals(fingerprint)) return { kind: 'mismatch' };
    const { response } = entry;
    if (raw && entry.raws.length < MAX_RAW_FINGERPRINTS && !entry.raws.some((r) => r.equals(raw))) {
      entry.raws.push(owned(raw));
      entry.bytes += raw.length;
      this.bytes += raw.length;
      this.shrinkToFit();
    }
    return { kind: 'replay', response };
  }

  /**
   * A replay for a request whose raw fingerprint is known to match the record, found without
   * computing the canonical fingerprint; undefined otherwise.
   */
  lookupRaw(key: string, raw: Buffer): StoredResponse | undefined {
    const entry = this.entry(key);
    if (!entry) return undefined;
    for (const known of entry.raws) if (known.equals(raw)) return entry.response;
    return undefined;
  }

  /** True when the cache has an answer for this record and fingerprint policy (any fingerprint). */
  holds(key: string): boolean {
    return this.entry(key) !== undefined;
  }

  private entry(key: string): Entry | undefined {
    if (!this.on) return undefined;
    const entry = this.entries.get(key);
    if (entry && entry.expiresAt <= this.now()) {
      this.remove(key, entry);
      return undefined;
    }
    return entry;
  }

  /**
   * Remembers a completed record a claim asked at `asked` found, unless the cache dropped anything
   * since (the record may be what was dropped) or the request's fingerprint policy is no longer in
   * force. It lives until `asked.at + expiresInMs`, less the clock slack: no later than the
   * database's expires_at, since the statement's now() came after `asked.at`.
   */
  remember(key: string, asked: Asked, record: Admission): void {
    if (!this.on || asked.generation !== this.generation) return;
    if (this.policies && !this.policies.has(record.epoch)) return;
    const expiresAt = asked.at + record.expiresInMs * (1 - CLOCK_RATE_SLACK);
    if (expiresAt <= this.now()) return;
    const { response, raw } = record;
    const bytes =
      response.body.length +
      (raw?.length ?? 0) +
      ENTRY_OVERHEAD_BYTES +
      response.headers.reduce((n, [k, v]) => n + 64 + 2 * (k.length + v.length), 0);
    if (bytes > this.maxBytes * MAX_ENTRY_SHARE) return;
    const previous = this.entries.get(key);
    if (previous) this.remove(key, previous);
    const digest = recordDigest(record.id);
    this.entries.set(key, {
      digest,
      epoch: record.epoch,
      fingerprint: record.fingerprint,
      raws: raw ? [owned(raw)] : [],
      response,
      expiresAt,
      bytes,
    });
    let keys = this.byDigest.get(digest);
    if (!keys) this.byDigest.set(digest, (keys = new Set()));
    keys.add(key);
    this.bytes += bytes;
    this.shrinkToFit();
  }

  /** Evicts the oldest entries (Map order is insertion order) until the cache is within its size. */
  private shrinkToFit(): void {
    for (const [oldest, entry] of this.entries) {
      if (this.bytes <= this.maxBytes) break;
      this.remove(oldest, entry);
    }
  }

  /** Forgets the record an operator cleared (the digest a clear's NOTIFY carries). */
  evict(digest: string): void {
    this.generation++;
    const keys = this.byDigest.get(digest);
    if (!keys) return;
    for (const key of keys) this.remove(key, this.entries.get(key)!);
  }

  /** Forgets a record cleared here (the admin API), before the clear is answered. */
  forget(id: RecordId): void {
    this.evict(recordDigest(id));
  }

  /**
   * The fingerprint policies of the config in force (a reload): entries of any other are dropped,
   * and no longer admitted. A route whose policy did not change keeps its entries.
   */
  keepPolicies(epochs: ReadonlySet<string>): void {
    this.generation++;
    this.policies = epochs;
    for (const [key, entry] of this.entries) if (!epochs.has(entry.epoch)) this.remove(key, entry);
  }

  clear(): void {
    this.generation++;
    this.entries.clear();
    this.byDigest.clear();
    this.bytes = 0;
  }

  get size(): number {
    return this.entries.size;
  }

  private remove(key: string, entry: Entry): void {
    this.entries.delete(key);
    const keys = this.byDigest.get(entry.digest);
    keys?.delete(key);
    if (keys?.size === 0) this.byDigest.delete(entry.digest);
    this.bytes -= entry.bytes;
  }
}

/**
 * A copy in memory of its own: a small raw fingerprint is a slice of Node's shared 8 KiB buffer
 * pool, and a cache entry holding the slice would keep the whole pool alive, uncounted.
 */
function owned(buffer: Buffer): Buffer {
  const copy = Buffer.allocUnsafeSlow(buffer.length);
  buffer.copy(copy);
  return copy;
}
