// Logs: one JSON object per line (pino) for machines; a readable form (pino-pretty) when writing to a
// terminal or when LOG_FORMAT=pretty. LOG_FORMAT=json forces JSON. LOG_LEVEL sets the level (info).
import pino, { type Logger } from 'pino';
import type PinoPretty from 'pino-pretty';
import { quote } from '../idempotency/canonical-json';
import { tryParseSizeBytes } from '../config/units';
import { StartupError } from '../startup-error';
import { rememberLast } from '../remember-last';

export interface LoggerOptions {
  /** 1 = stdout (serve), 2 = stderr (one-shot commands whose stdout is their result). */
  readonly fd?: 1 | 2;
  readonly env?: NodeJS.ProcessEnv;
  /** Fields on every line besides `service`: a cluster worker's `worker` and `pid`. */
  readonly base?: Readonly<Record<string, string | number>>;
}

const isoTimeFieldAt = rememberLast(isoTimeField);

/**
 * pino's isoTime, formatted once per millisecond rather than once per line: under load many request
 * lines share a millisecond, and toISOString showed up in profiles.
 */
export function isoTimeCachedPerMillisecond(): string {
  return isoTimeFieldAt(Date.now());
}

const isoSecondFieldAt = rememberLast(isoSecondField);

/**
 * `,"time":"<ISO 8601>"` for an instant (ms since the epoch, at or after it). Only the milliseconds
 * are formatted for each new millisecond: the rest is toISOString's once a second. toISOString
 * formats through V8's C++ (~7k instructions a call, callgrind), which a line paid in full whenever
 * its millisecond was new: on a quiet proxy, every line.
 */
export function isoTimeField(now: number): string {
  const second = Math.floor(now / 1000);
  return isoSecondFieldAt(second) + millisecondsField(now - second * 1000);
}

/** `,"time":"2026-12-06T20:26:01.` for a second since the epoch, as one flat string. */
function isoSecondField(second: number): string {
  return flatString(`,"time":"${new Date(second * 1000).toISOString().slice(0, 20)}`);
}

/** `042Z"`: the end of the time field, short enough that V8 joins it into one flat string. */
function millisecondsField(ms: number): string {
  return (ms < 10 ? '00' : ms < 100 ? '0' : '') + ms + 'Z"';
}

/**
 * The same text as one flat (sequential) string. A string joined with `+` is a tree of its pieces
 * until something reads it whole; a log line's batch is read whole when it is written, and that
 * walk costs by the piece. Flattened once, a fixed part is one piece in every line (with the
 * request line's repeated fields flattened too, the batch's walk fell from ~2.3k to ~0.9k
 * instructions a request, callgrind).
 * JSON.parse builds a new sequential string, and gives back exactly the string JSON.stringify was
 * given, lone surrogates included.
 */
export function flatString(text: string): string {
  return JSON.parse(JSON.stringify(text)) as string;
}

/** The most a crash can cost the log: the lines of the last this many milliseconds. */
const FLUSH_EVERY_MS = 100;
/**
 * Request lines are handed to the destination, and written, in strings of about this size: one
 * write(2) per ~60 request lines. The timer above bounds how long a line waits, whatever the size.
 */
const BATCH_BYTES = 16 * 1024;

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export const LOG_FORMATS = ['json', 'pretty'] as const;

/**
 * What LOG_BACKLOG defaults to: how many bytes of lines may wait for a stdout that is not being
 * read (a stalled log collector, a pipe nobody drains) before new lines are dropped instead. Without
 * a bound the lines would wait in memory for as long as the reader does, at ~300 bytes a request.
 */
export const DEFAULT_LOG_BACKLOG_BYTES = 16 * 1024 * 1024;

/**
 * Fails (exit 2, like a bad config) on a LOG_LEVEL or LOG_FORMAT we do not know, naming the allowed
 * values: pino would throw a stack for a bad level, and a bad format would silently mean JSON.
 * Empty counts as unset.
 */
export function checkLogSettings(env: NodeJS.ProcessEnv = process.env): void {
  const settings = [
    ['LOG_LEVEL', LOG_LEVELS],
    ['LOG_FORMAT', LOG_FORMATS],
  ] as const;
  for (const [name, allowed] of settings) {
    const value = env[name];
    if (value && !(allowed as readonly string[]).includes(value)) {
      throw new StartupError(
        `${name}=${JSON.stringify(value)} is not valid; expected one of: ${allowed.join(', ')}`,
        { exitCode: 2 },
      );
    }
  }
  logBacklogBytes(env);
}

/** LOG_BACKLOG (a size such as 16mb), or the default when unset or empty; exit 2 when unreadable. */
export function logBacklogBytes(env: NodeJS.ProcessEnv = process.env): number {
  const value = env.LOG_BACKLOG;
  if (!value) return DEFAULT_LOG_BACKLOG_BYTES;
  const bytes = tryParseSizeBytes(value);
  if (bytes === undefined || bytes < 64 * 1024) {
    throw new StartupError(
      `LOG_BACKLOG=${JSON.stringify(value)} is not valid; expected a size of at least 64kb, such as 16mb`,
      { exitCode: 2 },
    );
  }
  return bytes;
}

export function createLogger(options: LoggerOptions = {}): Logger {
  const env = options.env ?? process.env;
  checkLogSettings(env);
  const fd = options.fd ?? 1;
  const stream = fd === 1 ? process.stdout : process.stderr;
  const format = env.LOG_FORMAT || (stream.isTTY ? 'pretty' : 'json');
  const settings = {
    level: env.LOG_LEVEL || 'info',
    base: { service: 'idempotency-proxy', ...options.base },
    timestamp: isoTimeCachedPerMillisecond,
  };
  if (format === 'pretty') {
    return pino(
      settings,
      loadPretty()({
        destination: fd,
        sync: true,
        ignore: 'service,pid,hostname',
        translateTime: 'SYS:HH:MM:ss.l',
      }),
    );
  }
  // Asynchronous and batched (BATCH_BYTES): a line costs a buffer append, not a write(2). A timer flushes
  // quiet periods within 100 ms, so a crash (kill -9) loses at most the last 100 ms of lines; at exit
  // (SIGTERM, an error) what is left is written synchronously (whichever of this
  // hook and pino's own runs first, the order holds: pending request lines are always the newest).
  // Past LOG_BACKLOG waiting bytes sonic-boom drops what it is handed (its maxLength); the batch
  // counts the lines and says how many once the reader takes lines again.
  const destination = pino.destination({
    fd,
    sync: false,
    minLength: BATCH_BYTES,
    maxWrite: 4 * BATCH_BYTES,
    maxLength: logBacklogBytes(env),
  });
  const lines = new LineBatch(destination, JSON.stringify(settings.base).slice(1, -1));
  process.once('exit', () => lines.flushSync());
  setInterval(() => lines.flush(), FLUSH_EVERY_MS).unref();
  // Lines pino writes itself (warnings, errors) go after the request lines batched before them.
  const logger = pino(
    { ...settings, hooks: { streamWrite: (line: string) => lines.take() + line } },
    destination,
  );
  jsonLoggers.set(logger, { lines, base: JSON.stringify(settings.base).slice(1, -1) });
  return logger;
}

type Destination = ReturnType<typeof pino.destination>;

/**
 * Request lines gathered into BATCH_BYTES strings before they reach the destination: sonic-boom's write()
 * measures the byte length of its pending buffer on every call (~3 µs a line here), so one call per
 * batch instead of per line.
 */
class LineBatch {
  private pending = '';
  /** Lines dropped since the last notice that got through. */
  private dropped = 0;
  private notice: { line: string; count: number } | undefined;

  constructor(
    private readonly destination: Destination,
    private readonly base: string,
  ) {
    destination.on('drop', (data: string) => {
      if (data === this.notice?.line) this.dropped += this.notice.count;
      else this.dropped += countLines(data);
    });
  }

  add(line: string): void {
    this.pending += line;
    if (this.pending.length >= BATCH_BYTES) this.destination.write(this.take());
  }

  take(): string {
    const pending = this.pending;
    this.pending = '';
    return pending;
  }

  flush(): void {
    if (this.pending) this.destination.write(this.take());
    if (this.dropped > 0) this.sayDropped();
    this.destination.flush();
  }

  /** One warning with the count; if it is dropped too, the count waits for the next flush. */
  private sayDropped(): void {
    const count = this.dropped;
    this.dropped = 0;
    const line = `{"level":${pino.levels.values.warn}${isoTimeCachedPerMillisecond()},${this.base},"droppedLines":${count},"msg":"log lines dropped: the log's reader fell LOG_BACKLOG bytes behind"}\n`;
    this.notice = { line, count };
    this.destination.write(line);
  }

  flushSync(): void {
    try {
      if (this.pending) this.destination.write(this.take());
      this.destination.flushSync();
    } catch {
      // Destroyed or not open: nothing more can be written at exit.
    }
  }
}

function countLines(data: string): number {
  let count = 0;
  for (let at = data.indexOf('\n'); at !== -1; at = data.indexOf('\n', at + 1)) count++;
  return count;
}

const jsonLoggers = new WeakMap<Logger, { lines: LineBatch; base: string }>();

/**
 * Returns a function that logs one flat object at info level with a fixed message. For a JSON logger
 * from createLogger it formats the line itself, byte for byte what pino would write: pino walks and
 * escapes each field on its own, and for the request line (a flat object of short strings and
 * numbers, written once per request) that and the per-line write were ~9% of a pass-through request's
 * instructions. Formatted field by field (jsonFields, or `fieldsOf` for a known shape such as the
 * request line's) with a batched append it is a fraction of it. Any other logger (pretty, or a
 * test's) goes through pino.
 */
export function infoLineWriter<Fields extends object>(
  logger: Logger,
  msg: string,
  fieldsOf: (fields: Fields) => string = jsonFields,
): (fields: Fields) => void {
  const json = jsonLoggers.get(logger);
  if (!json) return (fields) => logger.info(fields as object, msg);
  const { lines, base } = json;
  const level = `{"level":${pino.levels.values.info}`;
  const afterTime = flatString(`,${base}`);
  const end = flatString(`,"msg":${JSON.stringify(msg)}}\n`);
  // The line's start, `{"level":30,"time":"…","service":…`, in three flat pieces: the second's
  // (joined once a second), the millisecond's digits and the base fields. Lines that share a
  // millisecond share the start too.
  const secondStart = rememberLast((second: number) => flatString(level + isoSecondField(second)));
  const startAt = rememberLast((now: number) => {
    const second = Math.floor(now / 1000);
    return secondStart(second) + millisecondsField(now - second * 1000) + afterTime;
  });
  return (fields) => {
    if (!logger.isLevelEnabled('info')) return;
    lines.add(startAt(Date.now()) + fieldsOf(fields) + end);
  };
}

/** `,"name":` for each field name seen: the names of a log line are a handful, fixed in the code. */
const fieldPrefixes = new Map<string, string>();

/**
 * The object's fields as JSON.stringify writes them, each after a comma, without the braces. The
 * request line's fields are short strings, numbers and booleans: written here without
 * JSON.stringify's walk of the whole object (~11.5k instructions a line against ~6k, callgrind).
 * Anything else is JSON.stringify's own.
 */
export function jsonFields(fields: object): string {
  let out = '';
  for (const name in fields) {
    const value: unknown = (fields as Record<string, unknown>)[name];
    let written: string;
    switch (typeof value) {
      case 'undefined':
      case 'function':
      case 'symbol':
        continue;
      case 'string':
        written = quote(value);
        break;
      case 'number':
        written = Number.isFinite(value) ? String(value) : 'null';
        break;
      case 'boolean':
        written = value ? 'true' : 'false';
        break;
      default: {
        // undefined for what JSON leaves out, such as an object whose toJSON returns undefined.
        const json = JSON.stringify(value) as string | undefined;
        if (json === undefined) continue;
        written = json;
      }
    }
    let prefix = fieldPrefixes.get(name);
    if (prefix === undefined) {
      prefix = `,${JSON.stringify(name)}:`;
      if (fieldPrefixes.size < 256) fieldPrefixes.set(name, prefix);
    }
    out += prefix + written;
  }
  return out;
}

/** pino-pretty is loaded only for a terminal (or LOG_FORMAT=pretty): a server writing JSON needs none of it. */
function loadPretty(): typeof PinoPretty {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return require('pino-pretty') as typeof PinoPretty;
}
