// An upstream that streams its answer piece by piece under the test's control: each piece is sent,
// then the stream waits at the gate the test set for it (or goes on after `paceMs`), so a test can
// hold a stream open mid-way, attach a repeat, and let it finish. It logs what it sent, and when,
// in one ordered list shared with the test's client (`order`), for ordering assertions.
import type http from 'node:http';
import { startUpstream, sleep, type TestUpstream } from './upstream';

export interface StreamScript {
  readonly contentType: string | undefined;
  readonly pieces: readonly string[];
  /** Pause between pieces when no gate is set. */
  readonly paceMs: number;
  /** After which piece (index) the upstream breaks the connection instead of going on. */
  readonly breakAfter?: number;
  /** After which piece the upstream stops sending and never ends (a stalled stream). */
  readonly stallAfter?: number;
}

export interface StreamUpstream extends TestUpstream {
  /** What happened, in order: `upstream:sent:<i>`, `upstream:end`, and what the test adds. */
  readonly order: string[];
  /** performance.now() when the last stream ended, for figures (never asserted on). */
  readonly endedAt: () => number | undefined;
  /** Holds the stream after piece `index` until the returned function is called. */
  gate(index: number): () => void;
  script: StreamScript;
}

export async function startStreamUpstream(script: StreamScript): Promise<StreamUpstream> {
  const order: string[] = [];
  const gates = new Map<number, Promise<void>>();
  const state: { script: StreamScript; endedAt?: number } = { script };
  const upstream = await startUpstream(async (_req, res: http.ServerResponse) => {
    const { contentType, pieces, paceMs, breakAfter, stallAfter } = state.script;
    res.writeHead(200, contentType === undefined ? {} : { 'content-type': contentType });
    res.flushHeaders();
    for (let i = 0; i < pieces.length; i++) {
      await write(res, pieces[i]!);
      order.push(`upstream:sent:${i}`);
      if (i === breakAfter) {
        res.socket?.destroy();
        return;
      }
      if (i === stallAfter) return;
      const gate = gates.get(i);
      gates.delete(i);
      if (gate !== undefined) await gate;
      else if (i < pieces.length - 1) await sleep(paceMs);
    }
    order.push('upstream:end');
    res.end(() => (state.endedAt = performance.now()));
  });
  const gate = (index: number): (() => void) => {
    let open!: () => void;
    gates.set(index, new Promise<void>((resolve) => (open = resolve)));
    return () => open();
  };
  // Accessors, not Object.assign (which would copy the script once, as a plain value).
  return Object.defineProperties(
    Object.assign(upstream, { order, gate, endedAt: () => state.endedAt }),
    {
      script: {
        get: () => state.script,
        set: (next: StreamScript) => (state.script = next),
      },
    },
  ) as StreamUpstream;
}

function write(res: http.ServerResponse, piece: string): Promise<void> {
  return new Promise((resolve) => {
    if (res.write(piece)) resolve();
    else res.once('drain', () => resolve());
  });
}
