// When a worker that exited on its own is started again: at once the first time, then backing off
// while exits keep coming, and never in an endless loop — past MAX_EXITS exits within WINDOW_MS the
// primary gives up and stops (a worker that cannot start will not start on the eleventh try either,
// and a log flooded with restarts hides the first line that said why).
//
//   exits in the last minute:  1      2       3       4      5 …  10      11
//   next worker starts after:  0 ms   250 ms  500 ms  1 s    2 s … 10 s   give up

export const WINDOW_MS = 60_000;
export const MAX_EXITS = 10;
const FIRST_BACKOFF_MS = 250;
const MAX_BACKOFF_MS = 10_000;

export type RespawnDecision =
  | { readonly respawn: true; readonly delayMs: number; readonly recentExits: number }
  | { readonly respawn: false; readonly recentExits: number };

export class RespawnPolicy {
  private exits: number[] = [];

  constructor(private readonly nowMs: () => number = Date.now) {}

  /** Records an exit and says whether (and after how long) to start a successor. */
  afterExit(): RespawnDecision {
    const now = this.nowMs();
    this.exits = this.exits.filter((at) => now - at < WINDOW_MS);
    this.exits.push(now);
    const recentExits = this.exits.length;
    if (recentExits > MAX_EXITS) return { respawn: false, recentExits };
    const delayMs =
      recentExits === 1 ? 0 : Math.min(MAX_BACKOFF_MS, FIRST_BACKOFF_MS * 2 ** (recentExits - 2));
    return { respawn: true, delayMs, recentExits };
  }
}
