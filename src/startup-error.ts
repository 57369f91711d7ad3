// Errors that stop the process before (or while) it starts serving, and that a person can act on: a
// port in use, an unreachable database, a data directory owned by another proxy. main.ts prints the
// message as one line, without a stack: the message already says what happened and what to do.

export class StartupError extends Error {
  /** 2 for bad usage or settings (like a bad config), 1 for a runtime failure. */
  readonly exitCode: 1 | 2;

  constructor(message: string, options: { exitCode?: 1 | 2; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'StartupError';
    this.exitCode = options.exitCode ?? 1;
  }
}
