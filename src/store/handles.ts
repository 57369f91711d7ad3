// The handles long calls are answered with (docs/long-calls.md): a call its upstream has not
// answered within the route's `after` is answered with a handle (an HTTP 202 and its status
// monitor, an MCP task) and polled on any instance. A handle lives in the call's own record: its
// secret, which every poll must carry, is drawn when the first handle is given and kept while the
// record lives, so every repeat and every instance hands out the same one.
//
//   open (while the call runs: in progress, its lease on) ─► the record's handle, new or the one it has
//   read ─► running (lease on) │ abandoned (lease over, never settled) │ done (the stored answer)
//   cancel (while it runs) ─► marked; the proxy running the call sees it and stops waiting upstream
import type { RecordId, StoredResponse } from './record';

/** A handle as its record keeps it. */
export interface Handle {
  /** Random, base64url: what makes the handle unguessable. */
  readonly secret: string;
  /** When its call was claimed (epoch ms, the database's clock): when the work it stands for began. */
  readonly createdAt: number;
  /** When the record expires, as of this reading (epoch ms): how long the handle can be polled. */
  readonly expiresAt: number;
  /** A cancel of the call was asked for (an MCP tasks/cancel). */
  readonly cancelRequested: boolean;
}

/** What a poll of a handle finds. */
export type HandleState =
  | { readonly kind: 'running'; readonly handle: Handle; readonly leaseRemainingMs: number }
  /** The claim's lease ended without an answer (the proxy running it stopped); `fence` is its claim. */
  | { readonly kind: 'abandoned'; readonly handle: Handle; readonly fence: string }
  | {
      readonly kind: 'done';
      readonly handle: Handle;
      readonly response: StoredResponse;
      /** When the answer was stored (epoch ms). */
      readonly completedAt: number;
    };

export interface HandleStore {
  /**
   * The record's handle: the one it has, or a new one with `secret`. Null when the call is not
   * running (answered, released, or its lease over): there is nothing to hand out a handle for.
   */
  open(id: RecordId, secret: string): Promise<Handle | null>;
  /** The record's handle and where its call stands; undefined when none lives under `id`. */
  read(id: RecordId): Promise<HandleState | undefined>;
  /** Marks a cancel asked for; false when no running call has a handle with this secret. */
  requestCancel(id: RecordId, secret: string): Promise<boolean>;
}
