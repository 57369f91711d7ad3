// Logs: one JSON object per line (pino) for machines; a readable form (pino-pretty) when writing to a
// terminal or when LOG_FORMAT=pretty. LOG_FORMAT=json forces JSON. LOG_LEVEL sets the level (info).
import pino, { type Logger } from 'pino';
import pretty from 'pino-pretty';

export interface LoggerOptions {
  /** 1 = stdout (serve), 2 = stderr (one-shot commands whose stdout is their result). */
  readonly fd?: 1 | 2;
  readonly env?: NodeJS.ProcessEnv;
}

let cachedAt = 0;
let cachedTime = '';

/**
 * pino's isoTime, formatted once per millisecond rather than once per line: under load many request
 * lines share a millisecond, and toISOString showed up in profiles.
 */
export function isoTimeCachedPerMillisecond(): string {
  const now = Date.now();
  if (now !== cachedAt) {
    cachedAt = now;
    cachedTime = `,"time":"${new Date(now).toISOString()}"`;
  }
  return cachedTime;
}

export function createLogger(options: LoggerOptions = {}): Logger {
  const env = options.env ?? process.env;
  const fd = options.fd ?? 1;
  const stream = fd === 1 ? process.stdout : process.stderr;
  const format = env.LOG_FORMAT ?? (stream.isTTY ? 'pretty' : 'json');
  const settings = {
    level: env.LOG_LEVEL ?? 'info',
    base: { service: 'idempotency-proxy' },
    timestamp: isoTimeCachedPerMillisecond,
  };
  if (format === 'pretty') {
    return pino(
      settings,
      pretty({
        destination: fd,
        sync: true,
        ignore: 'service,pid,hostname',
        translateTime: 'SYS:HH:MM:ss.l',
      }),
    );
  }
  // Asynchronous and batched (4 KiB): the per-request line costs a buffer append, not a write(2). A
  // timer flushes quiet periods within 250 ms, and pino flushes what is left when the process exits.
  const destination = pino.destination({ fd, sync: false, minLength: 4096 });
  setInterval(() => destination.flush(), 250).unref();
  return pino(settings, destination);
}
