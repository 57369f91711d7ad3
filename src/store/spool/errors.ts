// The spool's errors, one class each with a stable `code`, so a caller tells them apart with
// `instanceof` or by code without reading messages:
//
//   SPOOL_REFUSED        open(): the directory cannot be used (in use, unsafe permissions, not a
//                        directory, unwritable, path too long); the message says how to fix it
//   SPOOL_FULL           append(): the entry would take the live bytes past maxBytes; nothing written
//   SPOOL_FAILED         append(): a write or an fdatasync failed; after a failed fdatasync the spool
//                        takes no more appends (what the kernel kept is unknown). read(): the entry
//                        no longer reads back as written
//   SPOOL_CLOSED         append() or read() after close()
//   SPOOL_ENTRY_UNKNOWN  read(): no live entry has that seq

export const SPOOL_ERROR_CODES = [
  'SPOOL_REFUSED',
  'SPOOL_FULL',
  'SPOOL_FAILED',
  'SPOOL_CLOSED',
  'SPOOL_ENTRY_UNKNOWN',
] as const;

export type SpoolErrorCode = (typeof SPOOL_ERROR_CODES)[number];

export abstract class SpoolError extends Error {
  abstract readonly code: SpoolErrorCode;

  constructor(message: string, cause?: unknown) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = new.target.name;
  }
}

export class SpoolRefused extends SpoolError {
  readonly code = 'SPOOL_REFUSED';
}

export class SpoolFull extends SpoolError {
  readonly code = 'SPOOL_FULL';
}

export class SpoolFailed extends SpoolError {
  readonly code = 'SPOOL_FAILED';
}

export class SpoolClosed extends SpoolError {
  readonly code = 'SPOOL_CLOSED';
}

export class SpoolEntryUnknown extends SpoolError {
  readonly code = 'SPOOL_ENTRY_UNKNOWN';
}

/** What an error says, however it was thrown (and from whichever realm: not every Error is ours). */
export function messageOf(error: unknown): string {
  const message = (error as { message?: unknown } | null)?.message;
  return typeof message === 'string' ? message : String(error);
}
