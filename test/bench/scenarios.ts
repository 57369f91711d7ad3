// The scenarios: what the load generator sends, to which server, and what it expects back. Every one
// sends the same request — POST, a ~100-byte JSON body, an Idempotency-Key — so the columns compare
// like with like; only the target, the path and the key change.
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { request } from 'undici';
import { waitForMessage } from './children';
import { seedRows, startPrune } from './data-scale';
import type { ReplayAnswerMessage } from './replay-floor';
import type { ScenarioName } from './report';
import { debug, type ProxyConfigFile, stack } from './stack';

export const ALL_SCENARIOS = [
  'direct',
  'bare',
  'bare-undici',
  'fastify-proxy',
  'passthrough',
  'new-key',
  'new-key-citus',
  'store-floor',
  'replay',
  'replay-floor',
  'replay-no-cache',
  'storm-409',
  'new-key-sync-off',
  'new-key-spool',
] as const satisfies readonly ScenarioName[];

/** Added to the list by --rows N (data-scale.ts); never run without it. */
export const DATA_SCENARIOS = [
  'new-key-rows',
  'new-key-pruning',
] as const satisfies readonly ScenarioName[];

/**
 * Proxy configs besides the main one, each started as its own proxy for the scenarios that use it.
 * A build that rejects the option (older than it) falls back as the scenario says.
 */
export const CONFIG_VARIANTS = {
  'sync-off': 'synchronousCommit: false',
  'no-replay-cache': 'replayCache: 0b',
  // A spool of this run's own (one process per spool): the bench's store is a URL, where it is off.
  spool: `outbox: { spool: ${JSON.stringify(path.join(os.tmpdir(), `idempotency-proxy-bench-spool-${process.pid}`))} }`,
} as const;
export type ConfigVariant = keyof typeof CONFIG_VARIANTS;

export const BODY =
  '{"order":"ord_0042","amount":49.99,"currency":"EUR","reason":"requested_by_customer","agent":"bench-01"}';

/** autocannon replaces `[<id>]` with a fresh id in every request when uniqueIds is set. */
export const UNIQUE_KEY = 'bench-[<id>]';

export interface Endpoints {
  readonly upstream: string;
  readonly bare: string;
  readonly bareUndici: string;
  readonly fastify: string;
  readonly replayFloor: string;
  readonly proxy: string;
}

export interface Scenario {
  readonly name: ScenarioName;
  readonly label: string;
  /**
   * The server the load hits; its process is the "proxy" column (none for direct). `store`: no HTTP
   * load, pgbench on the store itself (store-floor.ts).
   */
  readonly target: keyof Endpoints | 'store';
  readonly path: string;
  /** A fresh key per request, or one fixed key prepared beforehand. */
  readonly key: 'unique' | 'fixed';
  readonly expectedStatus: number;
  /** On our proxy: report its store round trips per request (0 expected on pass-through). */
  readonly countsRoundTrips: boolean;
  /** Runs on its own proxy on the Citus cluster of --citus-url (its own table), counted there. */
  readonly citus?: true;
  /** Runs on its own proxy with this store option (CONFIG_VARIANTS). */
  readonly configVariant?: ConfigVariant;
  /**
   * synchronous_commit for this scenario: through configVariant when the build has the option,
   * else set server-wide (ALTER SYSTEM + reload) and reset afterwards.
   */
  readonly synchronousCommit?: 'off';
  /** Readies the fixed key; returns what undoes it after the scenario. */
  readonly prepare?: (endpoints: Endpoints, key: string) => Promise<() => Promise<void>>;
  /** Readies the store (seeding); returns a note for the details line. */
  readonly prepareStore?: (options: { rows: number }) => Promise<string>;
  /**
   * Starts something when the measured window starts (pruning); returns what ends it after the
   * window and gives a note for the details line.
   */
  readonly duringMeasurement?: () => () => Promise<string>;
}

export const SCENARIOS: Record<ScenarioName, Scenario> = {
  direct: {
    name: 'direct',
    label: 'direct upstream',
    target: 'upstream',
    path: '/refunds',
    key: 'unique',
    expectedStatus: 201,
    countsRoundTrips: false,
  },
  bare: {
    name: 'bare',
    label: 'bare http-proxy',
    target: 'bare',
    path: '/refunds',
    key: 'unique',
    expectedStatus: 201,
    countsRoundTrips: false,
  },
  'bare-undici': {
    name: 'bare-undici',
    label: 'bare undici',
    target: 'bareUndici',
    path: '/refunds',
    key: 'unique',
    expectedStatus: 201,
    countsRoundTrips: false,
  },
  'fastify-proxy': {
    name: 'fastify-proxy',
    label: '@fastify/http-proxy',
    target: 'fastify',
    path: '/refunds',
    key: 'unique',
    expectedStatus: 201,
    countsRoundTrips: false,
  },
  passthrough: {
    name: 'passthrough',
    label: 'our pass-through',
    target: 'proxy',
    path: '/pass/refunds',
    key: 'unique',
    expectedStatus: 201,
    countsRoundTrips: true,
  },
  'new-key': {
    name: 'new-key',
    label: 'our new key',
    target: 'proxy',
    path: '/refunds',
    key: 'unique',
    expectedStatus: 201,
    countsRoundTrips: true,
  },
  'new-key-citus': {
    name: 'new-key-citus',
    label: 'our new key, on Citus',
    target: 'proxy',
    path: '/refunds',
    key: 'unique',
    expectedStatus: 201,
    countsRoundTrips: true,
    citus: true,
  },
  'store-floor': {
    name: 'store-floor',
    label: 'store floor: pgbench INSERT+UPDATE',
    target: 'store',
    path: '',
    key: 'unique',
    expectedStatus: 0,
    countsRoundTrips: true,
  },
  replay: {
    name: 'replay',
    label: 'our replay',
    target: 'proxy',
    path: '/refunds',
    key: 'fixed',
    expectedStatus: 201,
    countsRoundTrips: true,
    prepare: completeKey,
  },
  'replay-floor': {
    name: 'replay-floor',
    label: 'bare node replay floor',
    target: 'replayFloor',
    path: '/refunds',
    key: 'fixed',
    expectedStatus: 201,
    countsRoundTrips: false,
    prepare: captureReplay,
  },
  'replay-no-cache': {
    name: 'replay-no-cache',
    label: 'our replay, replay cache off',
    target: 'proxy',
    path: '/refunds',
    key: 'fixed',
    expectedStatus: 201,
    countsRoundTrips: true,
    configVariant: 'no-replay-cache',
    prepare: completeKey,
  },
  'storm-409': {
    name: 'storm-409',
    label: 'our 409 storm',
    target: 'proxy',
    path: '/slow',
    key: 'fixed',
    expectedStatus: 409,
    countsRoundTrips: true,
    prepare: holdKeyInFlight,
  },
  'new-key-rows': {
    name: 'new-key-rows',
    label: 'our new key, --rows live rows in table',
    target: 'proxy',
    path: '/refunds',
    key: 'unique',
    expectedStatus: 201,
    countsRoundTrips: true,
    prepareStore: async ({ rows }) => {
      const seconds = await seedRows('live', rows);
      return `${rows.toLocaleString('en')} live rows seeded in ${seconds.toFixed(0)} s`;
    },
  },
  'new-key-pruning': {
    name: 'new-key-pruning',
    label: 'our new key, while pruning --rows',
    target: 'proxy',
    path: '/refunds',
    key: 'unique',
    expectedStatus: 201,
    countsRoundTrips: false, // the prune's own DELETEs would count
    prepareStore: async ({ rows }) => {
      const seconds = await seedRows('expired', rows);
      return `${rows.toLocaleString('en')} expired rows seeded in ${seconds.toFixed(0)} s`;
    },
    duringMeasurement: () => {
      const prune = startPrune((stack.proxyConfig as ProxyConfigFile).file);
      let finished: { deleted: number; batches: number; seconds: number } | undefined;
      void prune.done.then((result) => (finished = result)).catch(() => undefined);
      return async () => {
        const during = finished
          ? `the prune finished inside the window (${finished.deleted.toLocaleString('en')} rows, ${finished.batches} batches, ${finished.seconds.toFixed(1)} s)`
          : 'the prune ran through the whole window';
        const result = await prune.done;
        return `${during}; it deleted ${result.deleted.toLocaleString('en')} rows in ${result.batches} batches, ${result.seconds.toFixed(1)} s in all`;
      };
    },
  },
  'new-key-sync-off': {
    name: 'new-key-sync-off',
    label: 'our new key, sync_commit off',
    target: 'proxy',
    path: '/refunds',
    key: 'unique',
    expectedStatus: 201,
    countsRoundTrips: true,
    configVariant: 'sync-off',
    synchronousCommit: 'off',
  },
  'new-key-spool': {
    name: 'new-key-spool',
    label: 'our new key, spool on',
    target: 'proxy',
    path: '/refunds',
    key: 'unique',
    expectedStatus: 201,
    countsRoundTrips: true,
    configVariant: 'spool',
  },
};

export function requestHeaders(key: string): Record<string, string> {
  return { 'content-type': 'application/json', 'idempotency-key': key };
}

async function post(url: string, key: string): Promise<{ status: number; replayed: boolean }> {
  const response = await request(url, {
    method: 'POST',
    headers: requestHeaders(key),
    body: BODY,
  });
  await response.body.dump();
  return {
    status: response.statusCode,
    replayed: response.headers['idempotent-replayed'] === 'true',
  };
}

/** Replay: the key is completed once, and a second call must already be a replay. */
async function completeKey(endpoints: Endpoints, key: string): Promise<() => Promise<void>> {
  const url = `${endpoints.proxy}/refunds`;
  const first = await post(url, key);
  const second = await post(url, key);
  if (first.status !== 201 || second.status !== 201 || !second.replayed) {
    throw new Error(
      `replay setup: expected 201 then a replayed 201, got ${first.status} then ${second.status} (replayed: ${second.replayed})`,
    );
  }
  return async () => undefined;
}

export interface Answer {
  readonly status: number;
  /** The raw header list, name and value in turn, without what Node's server writes itself. */
  readonly headers: string[];
  readonly body: Buffer;
}

/** One POST of the bench's request with this key, its answer read as it came. */
function rawAnswer(url: string, key: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: 'POST', headers: requestHeaders(key) }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('error', reject);
      res.on('end', () => {
        const headers: string[] = [];
        for (let i = 0; i + 1 < res.rawHeaders.length; i += 2) {
          const name = res.rawHeaders[i] as string;
          if (/^(date|connection|keep-alive)$/i.test(name)) continue;
          headers.push(name, res.rawHeaders[i + 1] as string);
        }
        resolve({ status: res.statusCode ?? 0, headers, body: Buffer.concat(chunks) });
      });
    });
    req.on('error', reject);
    req.end(BODY);
  });
}

/** One more POST of a completed key, read as it came; throws unless it is a replay. */
export async function replayAnswer(url: string, key: string): Promise<Answer> {
  const answer = await rawAnswer(url, key);
  if (answer.status !== 201 || !answer.headers.some((v) => /^idempotent-replayed$/i.test(v))) {
    throw new Error(`replay floor setup: the captured answer is not a replay (${answer.status})`);
  }
  return answer;
}

/**
 * Replay floor: a key completed on our proxy as for `replay`, one more replay of it read as it came
 * (status, raw header list, body), and that answer handed to the floor server. Date, Connection and
 * Keep-Alive are left out: Node's server writes them for the floor as it does for our proxy.
 * BENCH_DEBUG=1 prints the answer and whether the floor's reads the same.
 */
async function captureReplay(endpoints: Endpoints, key: string): Promise<() => Promise<void>> {
  const floor = stack.replayFloor;
  if (!floor) throw new Error('replay floor: its server is not running');
  if (!stack.proxy) throw new Error('replay floor: needs our main proxy running (not --cpu-prof)');
  await completeKey(endpoints, key);
  const answer = await replayAnswer(`${endpoints.proxy}/refunds`, key);
  const set = waitForMessage(floor, 'answer-set', 10_000);
  const message: ReplayAnswerMessage = {
    type: 'answer',
    status: answer.status,
    headers: answer.headers,
    bodyBase64: answer.body.toString('base64'),
  };
  floor.process.send(message);
  await set;
  if (process.env.BENCH_DEBUG) {
    const fromFloor = await rawAnswer(`${endpoints.replayFloor}/refunds`, key);
    const same =
      fromFloor.status === answer.status &&
      JSON.stringify(fromFloor.headers) === JSON.stringify(answer.headers) &&
      fromFloor.body.equals(answer.body);
    debug(
      `replay floor: ${answer.status} ${JSON.stringify(answer.headers)} ${answer.body.toString()}; the floor's answer is ${same ? 'the same' : `different: ${JSON.stringify(fromFloor.headers)}`}`,
    );
  }
  return async () => undefined;
}

/**
 * 409 storm: one request on /slow (held by the upstream until released) claims the key; once a
 * repeat answers 409 the storm can start. Afterwards the upstream lets it go and it completes.
 */
async function holdKeyInFlight(endpoints: Endpoints, key: string): Promise<() => Promise<void>> {
  const url = `${endpoints.proxy}/slow`;
  const first = post(url, key);
  first.catch(() => undefined); // awaited below; never left unhandled meanwhile
  const deadline = Date.now() + 10_000;
  for (;;) {
    await new Promise((resolve) => setTimeout(resolve, 100));
    const probe = await post(url, key);
    if (probe.status === 409) break;
    if (Date.now() > deadline) {
      throw new Error(
        `409 storm setup: the key never showed in flight (last status ${probe.status})`,
      );
    }
  }
  return async () => {
    const released = await request(`${endpoints.upstream}/release-slow`);
    await released.body.dump();
    const outcome = await Promise.race([
      first,
      new Promise<never>((_, reject) =>
        setTimeout(
          () => reject(new Error('409 storm: the held request did not end')),
          30_000,
        ).unref(),
      ),
    ]);
    if (outcome.status !== 201) {
      throw new Error(`409 storm: the held request ended with ${outcome.status}, expected 201`);
    }
  };
}
