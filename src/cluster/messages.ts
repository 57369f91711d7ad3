// What a cluster's primary and its workers say to each other over the IPC channel node:cluster
// opens (JSON: plain values only). Every type is prefixed, so the messages of prom-client or of
// node:cluster itself on the same channel are never taken for ours.

const PREFIX = 'idempotency-proxy:';

/** What the primary asks every worker and waits for (questions.ts). */
export type Question =
  | { readonly what: 'metrics' }
  | { readonly what: 'outcomes' }
  /** The config text the primary checked: the worker compiles and swaps it in. */
  | { readonly what: 'reload'; readonly configText: string }
  /**
   * Records an operator cleared (their digests, as the eviction NOTIFY carries them): the worker's
   * replay cache drops them before it answers. Many at once are one question (cluster-forget.ts).
   */
  | { readonly what: 'forget'; readonly digests: readonly string[] };

export type ToWorker =
  /** The answer to `hello`: what a worker needs to serve. */
  | {
      readonly type: `${typeof PREFIX}start`;
      readonly databaseUrl: string;
      readonly configFile: string;
      readonly configText: string;
      /** Its own spool (worker-N in store.outbox.spool), when the config has one. */
      readonly spoolDir?: string;
    }
  | { readonly type: `${typeof PREFIX}ask`; readonly id: number; readonly question: Question }
  | { readonly type: `${typeof PREFIX}drain` };

export type FromWorker =
  /** Sent once the worker listens for messages (anything sent before would be lost). */
  | { readonly type: `${typeof PREFIX}hello` }
  | { readonly type: `${typeof PREFIX}listening`; readonly address: string; readonly port: number }
  /** It could not start: the one line a single process would have printed, and its exit code. */
  | { readonly type: `${typeof PREFIX}failed`; readonly message: string; readonly exitCode: 1 | 2 }
  | {
      readonly type: `${typeof PREFIX}answer`;
      readonly id: number;
      readonly value?: unknown;
      readonly error?: string;
    };

export const messageType = {
  start: `${PREFIX}start`,
  ask: `${PREFIX}ask`,
  drain: `${PREFIX}drain`,
  hello: `${PREFIX}hello`,
  listening: `${PREFIX}listening`,
  failed: `${PREFIX}failed`,
  answer: `${PREFIX}answer`,
} as const;

export function isToWorker(message: unknown): message is ToWorker {
  return isOurs(message);
}

export function isFromWorker(message: unknown): message is FromWorker {
  return isOurs(message);
}

function isOurs(message: unknown): boolean {
  const type = (message as { type?: unknown } | null)?.type;
  return typeof type === 'string' && type.startsWith(PREFIX);
}
