// A storm of fresh keys against one or more proxy instances while a fault hits their PostgreSQL, and
// the verdict afterwards: every key is retried once, and per key the executions upstream are
// counted, the answer a first client got is compared with what its retry replays, and a key that
// never ran upstream must never have been answered `Idempotency-Outcome: unknown`.
import { postJson, type TestResponse } from './http';
import type { TestProxy } from './proxy';
import { recordFigures } from './run-report';
import { sleep, startUpstream, type TestUpstream } from './upstream';
import { until } from './eventually';

/** The storms' lease: short, so that a claim left behind shows what it ends as soon after the storm. */
export const STORM_LEASE_MS = 2_500;

/** The one protected route the storms send to, as a `routes:` list entry. */
export const STORM_ROUTE = `
  - name: orders
    match: { method: POST, path: /orders }
    upstream: api
    idempotency: { lockTimeout: ${STORM_LEASE_MS}ms, unknownOutcome: fail }`;

/** A whole config for storm instances on the test's table, in front of `upstreamUrl`. */
export function stormYaml(upstreamUrl: string): string {
  return `
store: { table: "\${TEST_TABLE}", poolSize: 8 }
upstreams: { api: { url: ${upstreamUrl}, timeout: 1s } }
routes:${STORM_ROUTE}
`;
}

/** A storm over in-process instances (startProxy): every key to the first, duplicates to all. */
export function stormOver(
  upstream: { runs(key: string): number },
  proxies: readonly TestProxy[],
  name: string,
  fault: () => Promise<void>,
): Promise<StormFigures> {
  return runStorm(upstream, {
    urls: proxies.map((proxy) => proxy.url),
    path: '/orders',
    name,
    fault,
    settled: async () => proxies.every((proxy) => proxy.store.pendingWrites.writes === 0),
    leaseMs: STORM_LEASE_MS + 500,
    metrics: () => Promise.all(proxies.map((proxy) => proxy.metrics.registry.metrics())),
  });
}

/** The storm's verdict, its figures written to `testFile`'s report under `name`. */
export function expectNothingLost(testFile: string, name: string, figures: StormFigures): void {
  recordFigures(testFile, name, figures);
  expect(figures).toMatchObject({
    lostAnswers: 0,
    neverSentAnsweredUnknown: 0,
    executedTwice: 0,
  });
  // The storm did reach the upstream, on both sides of the fault.
  expect(figures.answered2xx).toBeGreaterThan(30);
}

/** An upstream that runs each key's request after a short, varying pause and names the execution. */
export async function startCountingUpstream(): Promise<
  TestUpstream & { runs(key: string): number }
> {
  const runs = new Map<string, number>();
  const upstream = await startUpstream(async (req, res) => {
    const key = String(req.headers['idempotency-key'] ?? '');
    const n = (runs.get(key) ?? 0) + 1;
    runs.set(key, n);
    // Long enough that completions overlap a fault, short enough for hundreds of keys a second.
    await sleep(5 + Math.floor(Math.random() * 30));
    res.writeHead(201, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ key, execution: n, at: Date.now() }));
  });
  return Object.assign(upstream, { runs: (key: string) => runs.get(key) ?? 0 });
}

interface Answer {
  readonly status: number;
  readonly body: string;
  readonly unknown: boolean;
}

export interface StormOptions {
  /** Where keys are sent: each key goes to the first; a duplicated key to every one at once. */
  readonly urls: readonly string[];
  /** The protected path. */
  readonly path: string;
  /** Key prefix (one per storm). */
  readonly name: string;
  /** Runs once the storm is under way; the storm ends a little after it returns. */
  readonly fault: () => Promise<void>;
  /** Every `duplicateEvery`th key is sent to every instance at once. */
  readonly duplicateEvery?: number;
  /** Requests in flight at once. */
  readonly concurrency?: number;
  /** At most this many keys. */
  readonly maxKeys?: number;
  /** Resolves once nothing is pending in any instance (their outboxes have drained). */
  readonly settled: () => Promise<boolean>;
  /** Time after the storm for leases of claims left behind to end (lockTimeout and a margin). */
  readonly leaseMs: number;
  /** The instances' Prometheus texts, for what their stores did (retries, background releases). */
  readonly metrics?: () => Promise<string[]>;
}

export interface StormFigures {
  readonly keys: number;
  readonly duplicates: number;
  /** Keys whose first clients got a 2xx (before the retries). */
  readonly answered2xx: number;
  /** Keys whose retry did not replay the 2xx a first client got. */
  readonly lostAnswers: number;
  /** Keys that never ran upstream before their retry, yet were answered unknown. */
  readonly neverSentAnsweredUnknown: number;
  /** Keys that ran upstream more than once. */
  readonly executedTwice: number;
  /** Status counts of the storm's own answers. */
  readonly statuses: Record<string, number>;
  /** Summed over the instances: what their stores' outboxes did. */
  readonly store?: Record<string, number>;
  /** A few of the keys behind each failure, to look at. */
  readonly examples: Record<string, string[]>;
}

async function answerOf(response: Promise<TestResponse>): Promise<Answer> {
  try {
    const res = await response;
    return {
      status: res.status,
      body: res.text(),
      unknown: res.headers['idempotency-outcome'] === 'unknown',
    };
  } catch {
    return { status: 0, body: '', unknown: false };
  }
}

export async function runStorm(
  upstream: { runs(key: string): number },
  options: StormOptions,
): Promise<StormFigures> {
  const duplicateEvery = options.duplicateEvery ?? 3;
  const concurrency = options.concurrency ?? 32;
  const maxKeys = options.maxKeys ?? 1_500;
  const keys: string[] = [];
  const answers = new Map<string, Answer[]>();
  let stopAt = Infinity;
  const post = (url: string, key: string) =>
    answerOf(postJson(`${url}${options.path}`, key, { key }));

  const client = async (): Promise<void> => {
    while (Date.now() < stopAt && keys.length < maxKeys) {
      const n = keys.length;
      const key = `${options.name}-${n}`;
      keys.push(key);
      const targets = n % duplicateEvery === 0 ? options.urls : options.urls.slice(0, 1);
      const got = await Promise.all(targets.map((url) => post(url, key)));
      answers.set(key, got);
      // While the store is away answers come at once: pace the keys so the storm outlasts it.
      if (got.every((answer) => answer.status >= 500 || answer.status === 0)) await sleep(20);
    }
  };
  const clients = Array.from({ length: concurrency }, client);
  await until(() => keys.length >= 60, 'the storm to get under way', { intervalMs: 5 });
  await options.fault();
  stopAt = Date.now() + 1_000;
  await Promise.all(clients);

  await until(options.settled, 'every pending write to land', {
    timeoutMs: 30_000,
    intervalMs: 50,
  });
  // A claim left in progress shows what it ends as once its lease is over.
  await sleep(options.leaseMs);

  const ranBeforeRetry = new Map(keys.map((key) => [key, upstream.runs(key)]));
  const retries = new Map<string, Answer>();
  for (let i = 0; i < keys.length; i += concurrency) {
    await Promise.all(
      keys.slice(i, i + concurrency).map(async (key) => {
        retries.set(key, await post(options.urls[0]!, key));
      }),
    );
  }

  const statuses: Record<string, number> = {};
  const examples: Record<string, string[]> = {};
  const example = (what: string, key: string): void => {
    const list = (examples[what] ??= []);
    if (list.length < 5) list.push(key);
  };
  let answered2xx = 0;
  let lostAnswers = 0;
  let neverSentAnsweredUnknown = 0;
  let executedTwice = 0;
  for (const key of keys) {
    const got = answers.get(key) ?? [];
    const retry = retries.get(key)!;
    for (const answer of got) statuses[answer.status] = (statuses[answer.status] ?? 0) + 1;
    if (upstream.runs(key) > 1) {
      executedTwice++;
      example('executedTwice', key);
    }
    const first2xx = got.find((answer) => answer.status >= 200 && answer.status < 300);
    if (first2xx) {
      answered2xx++;
      if (retry.status !== first2xx.status || retry.body !== first2xx.body) {
        lostAnswers++;
        example(`lost (retry ${retry.status})`, key);
      }
    }
    if (ranBeforeRetry.get(key) === 0 && [...got, retry].some((answer) => answer.unknown)) {
      neverSentAnsweredUnknown++;
      example('neverSentAnsweredUnknown', key);
    }
  }
  const texts = (await options.metrics?.()) ?? [];
  const store = texts.length
    ? {
        completionsLandedAfterRetry: metricSum(
          texts,
          'store_writes_landed_after_retry_total',
          'complete',
        ),
        releasesLandedAfterRetry: metricSum(
          texts,
          'store_writes_landed_after_retry_total',
          'release',
        ),
        retries: metricSum(texts, 'store_write_retries_total'),
        lostClaimsReleased: metricSum(texts, 'store_background_releases_total', 'released'),
        lostClaimsNotClaimed: metricSum(texts, 'store_background_releases_total', 'not_claimed'),
        dropped: metricSum(texts, 'store_writes_dropped_total'),
      }
    : undefined;
  return {
    store,
    keys: keys.length,
    duplicates: keys.filter((_, n) => n % duplicateEvery === 0).length,
    answered2xx,
    lostAnswers,
    neverSentAnsweredUnknown,
    executedTwice,
    statuses,
    examples,
  };
}

/** The sum of a counter over the texts, of the series whose labels include `"label"` when given. */
function metricSum(texts: readonly string[], name: string, label?: string): number {
  let sum = 0;
  for (const text of texts)
    for (const line of text.split('\n')) {
      if (!line.startsWith(`idempotency_proxy_${name}`)) continue;
      if (label !== undefined && !line.includes(`="${label}"`)) continue;
      sum += Number(line.slice(line.lastIndexOf(' ') + 1));
    }
  return sum;
}
