// One way to wait for something for a while: the race between a promise and a timer, with the timer
// cleared however the race ends, so a finished wait leaves nothing scheduled behind it.

/**
 * `work`'s result, or what `late` returns (or throws) once `ms` have passed without `work` settling.
 * A rejection of `work` before then rejects; after then nobody waits for it. `unref`: the timer
 * alone does not keep the process alive (a wait that must not hold up an exit).
 */
export async function within<T, L>(
  work: Promise<T>,
  ms: number,
  late: () => L,
  unref = false,
): Promise<T | L> {
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<L>((resolve, reject) => {
    timer = setTimeout(() => {
      try {
        resolve(late());
      } catch (error) {
        reject(error);
      }
    }, ms);
    if (unref) timer.unref();
  });
  try {
    return await Promise.race([work, timedOut]);
  } finally {
    clearTimeout(timer);
  }
}
