// The signal that asks a serving process to drain and stop: SIGTERM (an orchestrator) or SIGINT
// (Ctrl-C), whichever comes first. SIGHUP is a reload, handled where the config is.

/** Resolves with the first SIGTERM or SIGINT this process receives. */
export function stopSignal(): Promise<NodeJS.Signals> {
  return new Promise<NodeJS.Signals>((resolve) => {
    process.once('SIGTERM', () => resolve('SIGTERM'));
    process.once('SIGINT', () => resolve('SIGINT'));
  });
}
