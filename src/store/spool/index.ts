// The spool's public face: a local, crash-safe log of pending writes (spool.ts) and its errors.
export {
  COMPACTING_FILE,
  type RecoveredEntry,
  Spool,
  type SpoolEntry,
  SPOOL_FILE,
  type SpoolOptions,
  type TornTail,
} from './spool';
export {
  SPOOL_ERROR_CODES,
  SpoolClosed,
  SpoolEntryUnknown,
  SpoolError,
  type SpoolErrorCode,
  SpoolFailed,
  SpoolFull,
  SpoolRefused,
} from './errors';
