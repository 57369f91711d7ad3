// The handles long calls are answered with (docs/long-calls.md): a call its upstream has not
// answered within the route's `after` is answered with a handle (an HTTP 202 and its status
// monitor) and polled on any instance. A handle lives in the call's own record: its secret, which
// every poll must carry, is drawn when the first handle is given and kept while the record lives,
// so every instance reads the same one.
//
//   open (while the call runs: in progress, its lease on) ─► the record's handle, new or the one it has
//   read ─► running (lease on) │ abandoned (lease over, never settled) │ done (the stored answer)
import type { RecordId, StoredResponse } from './record';

/** A handle as its record keeps it. */
export interface Handle {
  /** Random, base64url: what makes the handle unguessable. */
  readonly secret: string;
  /** What the protocol keeps with it, to find the running call again (none for REST). */
  readonly attributes: Readonly<Record<string, string>>;
  /** When its call was claimed (epoch ms, the database's clock): when the work it stands for began. */
  readonly createdAt: number;
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
   * The record's handle: the one it has, or a new one with `secret` and `attributes`. Null when the
   * call is not running (answered, released, or its lease over): there is nothing to hand out a
   * handle for.
   */
  open(
    id: RecordId,
    secret: string,
    attributes: Readonly<Record<string, string>>,
  ): Promise<Handle | null>;
  /** The record's handle and where its call stands; undefined when none lives under `id`. */
  read(id: RecordId): Promise<HandleState | undefined>;
}
