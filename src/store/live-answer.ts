// One streamed answer as it happens, for the repeats that attach to it (onConcurrent: attach):
// the head, what was sent so far, then every chunk as it comes, then the same end. The request that
// holds the claim feeds it (its protocol's receiver); local-keys.ts hands it to a repeat of the key
// in this process; attachClient (protected/attach.ts) writes it to the repeat's client. It keeps no bytes of its own:
// "so far" is the answer's capture, which is kept for the record anyway, and a repeat can attach
// only while that capture is whole (up to maxResponseBytes). After that, a repeat waits for the
// record instead.
//
//   waiting ──open(head)──► open ──end()──► ended      close() before open: opened resolves false
//                            └──fail()──► failed       (the answer was not a stream: repeats wait)
import type { HeaderPairs } from '../http/headers';

export interface LiveHead {
  readonly status: number;
  /** The headers as a replay would send them (no framing, Set-Cookie as the route keeps it). */
  readonly headers: HeaderPairs;
}

/** What the claim's receiver keeps of the answer: `whole` until it outgrew maxResponseBytes. */
export interface Capture {
  readonly chunks: readonly Buffer[];
  readonly whole: boolean;
}

/** A repeat attached to the answer. */
export interface LiveListener {
  chunk(chunk: Buffer): void;
  /**
   * The record is settled and the answer ended as it did for the first client; `final`: the message
   * it ended with, where a protocol answers each caller under its own id (MCP).
   */
  end(final?: Buffer): void;
  /** The answer broke off (the upstream failed mid-stream): the repeat's answer is cut too. */
  fail(): void;
}

export class LiveAnswer {
  private state: 'waiting' | 'open' | 'ended' | 'failed' = 'waiting';
  private head: LiveHead | undefined;
  private capture: Capture | undefined;
  private readonly listeners = new Set<LiveListener>();
  private resolveOpened!: (open: boolean) => void;
  /** Resolves true once the answer is streaming, false if it ended before it was a stream. */
  readonly opened = new Promise<boolean>((resolve) => (this.resolveOpened = resolve));

  /** True while a repeat can still get the whole answer: streaming, and its capture whole. */
  get attachable(): boolean {
    return this.state === 'open' && this.capture!.whole;
  }

  /** True until the answer streams or ends: `opened` has not resolved yet. */
  get pending(): boolean {
    return this.state === 'waiting';
  }

  /** How many repeats are attached now. */
  get attached(): number {
    return this.listeners.size;
  }

  open(head: LiveHead, capture: Capture): void {
    if (this.state !== 'waiting') return;
    this.state = 'open';
    this.head = head;
    this.capture = capture;
    this.resolveOpened(true);
  }

  push(chunk: Buffer): void {
    for (const listener of this.listeners) listener.chunk(chunk);
  }

  end(final?: Buffer): void {
    this.finish('ended', final);
  }

  fail(): void {
    this.finish('failed');
  }

  /** The forward is over: an answer never opened tells its waiters so; one left open fails. */
  close(): void {
    this.resolveOpened(false);
    if (this.state === 'open') this.fail();
    else if (this.state === 'waiting') this.state = 'ended';
  }

  /**
   * Attaches `listener`: returns the head and the chunks sent so far (to write first, before any
   * chunk the listener is given), or undefined when the answer can no longer be joined whole.
   */
  attach(
    listener: LiveListener,
  ): { readonly head: LiveHead; readonly sofar: readonly Buffer[] } | undefined {
    if (!this.attachable) return undefined;
    this.listeners.add(listener);
    return { head: this.head!, sofar: [...this.capture!.chunks] };
  }

  detach(listener: LiveListener): void {
    this.listeners.delete(listener);
  }

  private finish(state: 'ended' | 'failed', final?: Buffer): void {
    if (this.state !== 'open') return;
    this.state = state;
    const listeners = [...this.listeners];
    this.listeners.clear();
    for (const listener of listeners) {
      if (state === 'ended') listener.end(final);
      else listener.fail();
    }
  }
}
