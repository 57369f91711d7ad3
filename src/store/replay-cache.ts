// An in-process cache of completed records, so a replay (or a 422 for a reused key) needs no round
// trip. Safe because a completed record never changes: it only expires (entries expire earlier than
// the database says, by a margin) or is cleared by an operator (every instance hears the clear through
// NOTIFY and evicts; while that LISTEN connection is down the cache is not used at all, and it is
// emptied when the connection comes back, since clears may have been missed).
//
// The store the request path talks to owns it (coalescing-store.ts), and counts its hits there.
import { performance } from 'node:perf_hooks';
import { type RecordId, recordDigest, recordText, type StoredResponse } from './record';

/** Serve cached entries this long less than the database's expiry, for clock and round-trip skew. */
const EXPIRY_MARGIN_MS = 1_000;
/** What an entry costs beyond its body and headers (Map slot, objects, digest, fingerprint), measured. */
const ENTRY_OVERHEAD_BYTES = 1_024;
/** Records whose body is larger than this share of the cache are not cached. */
const MAX_ENTRY_SHARE = 0.1;
/** Raw fingerprints (fingerprint.ts) remembered per entry: the spellings of one body seen so far. */
const MAX_RAW_FINGERPRINTS = 4;

interface Entry {
  /** The record's NOTIFY identity, for evictions (computed once, when the entry is admitted). */
  readonly digest: string;
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

/**
 * Entries are keyed by the record's text identity (recordText: a string join, no hashing on the
 * request path); the SHA-256 digest that clears arrive with is computed once per admitted entry and
 * indexed on the side.
 */
export class ReplayCache {
  private readonly entries = new Map<string, Entry>();
  private readonly byDigest = new Map<string, string>();
  private bytes = 0;
  private live = false;

  constructor(
    private readonly maxBytes: number,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** Whether clears can reach this instance (its LISTEN connection is up); the cache is off otherwise. */
  setLive(live: boolean): void {
    if (live !== this.live) this.clear();
    this.live = live;
  }

  /**
   * Answers a repeat from memory; undefined = ask the database. `raw`, the request's raw
   * fingerprint when it has one, is remembered on a replay.
   */
  lookup(id: RecordId, fingerprint: Buffer, raw?: Buffer, text = recordText(id)): CacheLookup {
    const entry = this.live ? this.entry(text) : undefined;
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
  lookupRaw(id: RecordId, raw: Buffer, text = recordText(id)): StoredResponse | undefined {
    const entry = this.live ? this.entry(text) : undefined;
    if (!entry || !entry.raws.some((known) => known.equals(raw))) return undefined;
    return entry.response;
  }

  private entry(text: string): Entry | undefined {
    const entry = this.entries.get(text);
    if (entry && entry.expiresAt <= this.now()) {
      this.remove(text, entry);
      return undefined;
    }
    return entry;
  }

  /** Remembers a completed record that the database says lives `expiresInMs` longer. */
  remember(
    id: RecordId,
    fingerprint: Buffer,
    response: StoredResponse,
    expiresInMs: number,
    raw?: Buffer,
  ): void {
    if (!this.live || expiresInMs <= EXPIRY_MARGIN_MS) return;
    const bytes =
      response.body.length +
      (raw?.length ?? 0) +
      ENTRY_OVERHEAD_BYTES +
      response.headers.reduce((n, [k, v]) => n + 64 + 2 * (k.length + v.length), 0);
    if (bytes > this.maxBytes * MAX_ENTRY_SHARE) return;
    const text = recordText(id);
    const previous = this.entries.get(text);
    if (previous) this.remove(text, previous);
    const digest = recordDigest(id);
    this.entries.set(text, {
      digest,
      fingerprint,
      raws: raw ? [owned(raw)] : [],
      response,
      expiresAt: this.now() + expiresInMs - EXPIRY_MARGIN_MS,
      bytes,
    });
    this.byDigest.set(digest, text);
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
    const text = this.byDigest.get(digest);
    const entry = text === undefined ? undefined : this.entries.get(text);
    if (text !== undefined && entry) this.remove(text, entry);
  }

  clear(): void {
    this.entries.clear();
    this.byDigest.clear();
    this.bytes = 0;
  }

  get size(): number {
    return this.entries.size;
  }

  private remove(text: string, entry: Entry): void {
    this.entries.delete(text);
    this.byDigest.delete(entry.digest);
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
