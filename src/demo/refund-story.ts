// The refund story of the seed articles, told against a real proxy: an agent asks for a refund, its
// HTTP call times out, it retries with the same Idempotency-Key, and the payments service still
// creates exactly one refund. The same three attempts sent straight to the service create three.
import { randomUUID } from 'node:crypto';
import { request } from 'undici';

export interface StoryOptions {
  /** Base URL of the proxy in front of the payments service. */
  readonly proxyUrl: string;
  /** Base URL of the payments service itself, for the "without the proxy" contrast. */
  readonly paymentsUrl: string;
  /** How long the client waits before it gives up on an attempt (the service is slower than this). */
  readonly clientTimeoutMs: number;
  /** How long the service takes; attempts are sent with ?slow= so the first one times out. */
  readonly serviceDelayMs: number;
  readonly print: (line: string) => void;
}

export interface StoryResult {
  readonly attempts: {
    status: number | 'timeout';
    replayed: boolean;
    refundId: string | undefined;
  }[];
  readonly refundsThroughProxy: number;
  readonly refundsWithoutProxy: number;
}

interface Attempt {
  status: number | 'timeout';
  replayed: boolean;
  refundId: string | undefined;
  retryAfterSeconds: number | undefined;
}

async function postRefund(baseUrl: string, key: string, options: StoryOptions): Promise<Attempt> {
  try {
    const response = await request(`${baseUrl}/refunds?slow=${options.serviceDelayMs}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body: JSON.stringify({
        order: 'ord_4021',
        amount: 49.99,
        reason: 'Accidental double charge',
      }),
      // A precise client-side deadline (undici's own timeouts have about 1 s granularity).
      signal: AbortSignal.timeout(options.clientTimeoutMs),
    });
    const text = await response.body.text();
    const parsed = safeJson(text);
    return {
      status: response.statusCode,
      replayed: response.headers['idempotent-replayed'] === 'true',
      refundId: typeof parsed?.id === 'string' ? parsed.id : undefined,
      retryAfterSeconds: response.headers['retry-after']
        ? Number(response.headers['retry-after'])
        : undefined,
    };
  } catch (error) {
    if ((error as { name?: string }).name === 'TimeoutError') {
      return {
        status: 'timeout',
        replayed: false,
        refundId: undefined,
        retryAfterSeconds: undefined,
      };
    }
    throw error;
  }
}

/** An agent's retry loop: resend with the same key on a timeout or a 409, at most three attempts. */
async function retryingClient(
  baseUrl: string,
  key: string,
  options: StoryOptions,
  label: string,
): Promise<Attempt[]> {
  const attempts: Attempt[] = [];
  for (let n = 1; n <= 3; n++) {
    const attempt = await postRefund(baseUrl, key, options);
    attempts.push(attempt);
    options.print(`  ${label} attempt ${n}: ${describe(attempt)}`);
    if (attempt.status !== 'timeout' && attempt.status !== 409) break;
    // After a timeout, retry at once; after a 409, wait a while (Retry-After is the lease left: an upper bound).
    const waitMs =
      attempt.status === 'timeout'
        ? 100
        : Math.min((attempt.retryAfterSeconds ?? 1) * 1000, options.serviceDelayMs);
    await sleep(waitMs);
  }
  return attempts;
}

export async function tellRefundStory(options: StoryOptions): Promise<StoryResult> {
  const { print } = options;
  print(
    `An agent refunds order ord_4021. The payments service takes ${options.serviceDelayMs} ms; the agent gives up after ${options.clientTimeoutMs} ms and retries with the same Idempotency-Key.`,
  );
  print('');
  print('Through idempotency-proxy:');
  const before = await countRefunds(options.paymentsUrl);
  const attempts = await retryingClient(
    options.proxyUrl,
    `refund-${randomUUID()}`,
    options,
    'proxy',
  );
  await sleep(options.serviceDelayMs);
  const throughProxy = (await countRefunds(options.paymentsUrl)) - before;
  print(
    `  → ${attempts.length} attempts, ${throughProxy} refund${throughProxy === 1 ? '' : 's'} created.`,
  );
  print('');
  print('The same agent calling the payments service directly:');
  const directBefore = await countRefunds(options.paymentsUrl);
  const direct = await retryingClient(
    options.paymentsUrl,
    `refund-${randomUUID()}`,
    options,
    'direct',
  );
  await sleep(options.serviceDelayMs);
  const withoutProxy = (await countRefunds(options.paymentsUrl)) - directBefore;
  print(
    `  → ${direct.length} attempts, ${withoutProxy} refund${withoutProxy === 1 ? '' : 's'} created.`,
  );
  return {
    attempts: attempts.map(({ status, replayed, refundId }) => ({ status, replayed, refundId })),
    refundsThroughProxy: throughProxy,
    refundsWithoutProxy: withoutProxy,
  };
}

async function countRefunds(paymentsUrl: string): Promise<number> {
  const response = await request(`${paymentsUrl}/refunds`);
  const parsed = (await response.body.json()) as { count: number };
  return parsed.count;
}

function describe(attempt: Attempt): string {
  if (attempt.status === 'timeout') return 'timed out waiting for an answer';
  if (attempt.status === 409)
    return `409 still in flight (Retry-After: ${attempt.retryAfterSeconds ?? '?'})`;
  const how = attempt.replayed ? 'replayed by the proxy (Idempotent-Replayed: true)' : 'executed';
  return `${attempt.status} refund ${attempt.refundId ?? '?'}, ${how}`;
}

function safeJson(text: string): Record<string, unknown> | undefined {
  try {
    return JSON.parse(text) as Record<string, unknown>;
  } catch {
    return undefined;
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
