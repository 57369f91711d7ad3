// A KeyStore held in a Map, with the PostgreSQL store's semantics (claims, fences, leases,
// completion, release, takeover, settling an unknown outcome, the audit counters), for unit tests of
// the state machine (decide.ts). The contract suite (key-store-contract.ts) holds it to the same
// behaviour as PostgreSQL; its clock is a function, so tests can move time on instead of waiting.
import type {
  ClaimRequest,
  ClaimResult,
  CounterDelta,
  KeyStore,
  CompleteResult,
  Landing,
  PeekResult,
  RecordId,
  StoredResponse,
} from '../../src/store/record';
import { randomUUID } from 'node:crypto';
import { recordText } from '../../src/store/record';

interface Row {
  fingerprint: Buffer;
  state: 'in_progress' | 'completed';
  /** The claim's token, new for every claim and takeover: the fence its holder writes with. */
  token: string;
  leaseEndsAt: number;
  expiresAt: number;
  response: StoredResponse | undefined;
  attempts: number;
  replays: number;
  /** Settled as an unknown outcome because the lease ended: the holder's answer may replace it. */
  provisional?: boolean;
}

export class MemoryKeyStore implements KeyStore {
  readonly rows = new Map<string, Row>();
  /** Store operations in the order they were called, for assertions. */
  readonly calls: string[] = [];
  /** When set, every operation rejects with it (a store that went away). */
  failWith: Error | undefined;

  constructor(readonly now: () => number = () => Date.now()) {}

  /** Seeds a record as another instance would have left it. */
  seed(id: RecordId, row: Partial<Row> & Pick<Row, 'fingerprint' | 'state'>): void {
    this.rows.set(recordText(id), {
      token: randomUUID(),
      leaseEndsAt: this.now() + 60_000,
      expiresAt: this.now() + 3_600_000,
      response: undefined,
      attempts: 1,
      replays: 0,
      ...row,
    });
  }

  row(id: RecordId): Row | undefined {
    return this.rows.get(recordText(id));
  }

  async claim(request: ClaimRequest): Promise<ClaimResult> {
    this.enter('claim');
    const text = recordText(request.id);
    const now = this.now();
    const row = this.rows.get(text);
    if (row === undefined || row.expiresAt <= now) {
      // A new or expired row is claimed afresh, with a new token: any former holder's is stale.
      const token = randomUUID();
      this.rows.set(text, {
        fingerprint: request.fingerprint,
        state: 'in_progress',
        token,
        leaseEndsAt: now + request.leaseMs,
        expiresAt: now + Math.max(request.claimExpiryMs, request.leaseMs),
        response: undefined,
        attempts: 1,
        replays: 0,
      });
      return { kind: 'claimed', fence: token, attempts: 1 };
    }
    row.attempts++;
    const attempts = row.attempts;
    if (!row.fingerprint.equals(request.fingerprint)) return { kind: 'mismatch', attempts };
    if (row.state === 'completed') {
      row.replays++;
      return {
        kind: 'completed',
        response: row.response!,
        expiresInMs: row.expiresAt - now,
        attempts,
      };
    }
    const leaseRemainingMs = Math.max(0, row.leaseEndsAt - now);
    return { kind: 'in-flight', fence: row.token, leaseRemainingMs, attempts };
  }

  async complete(
    id: RecordId,
    fence: string,
    response: StoredResponse,
    ttlMs: number,
  ): Promise<CompleteResult> {
    this.enter('complete');
    const row = this.current(id, fence) ?? this.replaceable(id, fence, response);
    if (row === undefined) return { landing: 'stale' };
    row.provisional = false;
    // As a bytea NULL reads back: an omitted body is empty.
    const expiresAt = Math.max(row.state === 'completed' ? row.expiresAt : 0, this.now() + ttlMs);
    const body = response.bodyOmitted ? Buffer.alloc(0) : response.body;
    const stored: StoredResponse = { ...response, body, expiresAt };
    Object.assign(row, { state: 'completed', response: stored, expiresAt });
    return { landing: 'stored', expiresAt };
  }

  async release(id: RecordId, fence: string): Promise<Landing> {
    this.enter('release');
    if (this.current(id, fence) === undefined) return 'stale';
    this.rows.delete(recordText(id));
    return 'stored';
  }

  /** Adds the counts to the rows, as the PostgreSQL store does to completed ones. */
  async flushCounters(deltas: readonly CounterDelta[]) {
    this.enter('flushCounters');
    for (const delta of deltas) {
      const row = this.rows.get(recordText(delta.id));
      if (row?.state !== 'completed') continue;
      row.attempts += delta.attempts;
      row.replays += delta.replays;
    }
  }

  async peek(id: RecordId, fingerprint: Buffer): Promise<PeekResult> {
    this.enter('peek');
    const row = this.rows.get(recordText(id));
    if (row === undefined || row.expiresAt <= this.now()) return { kind: 'absent' };
    if (!row.fingerprint.equals(fingerprint)) return { kind: 'mismatch' };
    if (row.state === 'completed') return { kind: 'completed' };
    return { kind: 'in-flight', leaseRemainingMs: Math.max(0, row.leaseEndsAt - this.now()) };
  }

  async takeOver(id: RecordId, fence: string, leaseMs: number, claimExpiryMs: number) {
    this.enter('takeOver');
    const row = this.current(id, fence);
    if (row === undefined || row.leaseEndsAt > this.now()) return null;
    row.token = randomUUID();
    row.leaseEndsAt = this.now() + leaseMs;
    row.expiresAt = Math.max(row.expiresAt, this.now() + Math.max(claimExpiryMs, leaseMs));
    return row.token;
  }

  async settleUnknown(id: RecordId, fence: string, response: StoredResponse, ttlMs: number) {
    this.enter('settleUnknown');
    const row = this.current(id, fence);
    if (row === undefined || row.leaseEndsAt > this.now()) return null;
    // Whatever the caller passed, what is stored is an unknown outcome with its body.
    const expiresAt = this.now() + ttlMs;
    const stored = { ...response, bodyOmitted: false, outcomeUnknown: true, expiresAt };
    Object.assign(row, { state: 'completed', response: stored, expiresAt, provisional: true });
    row.replays++;
    return stored;
  }

  /** A row the holder's answer replaces: its lease ended and was settled as an unknown outcome. */
  private replaceable(id: RecordId, fence: string, response: StoredResponse): Row | undefined {
    const row = this.rows.get(recordText(id));
    if (response.outcomeUnknown || row?.provisional !== true || row.token !== fence)
      return undefined;
    return row.expiresAt > this.now() ? row : undefined;
  }

  private enter(operation: string): void {
    this.calls.push(operation);
    if (this.failWith) throw this.failWith;
  }

  private current(id: RecordId, fence: string): Row | undefined {
    const row = this.rows.get(recordText(id));
    return row?.state === 'in_progress' && row.token === fence ? row : undefined;
  }
}
