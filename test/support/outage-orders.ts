// The client side of the outage tests (answers-outlive-outages, spool): POST /orders with a key, as
// an agent retries it, and the first answers given while PostgreSQL is cut off mid-call.
import { until } from './eventually';
import { postJson, type TestResponse } from './http';
import { type CountingUpstream, sleep } from './upstream';

export const order = (url: string, key: string): Promise<TestResponse> =>
  postJson(`${url}/orders`, key, { key });

/** `count` fresh keys named after the case. */
export const keysOf = (name: string, count = 10): string[] =>
  Array.from({ length: count }, (_, i) => `${name}-${i}-${Date.now()}`);

/** A retry as a client sends it: again after Retry-After while the store answers 503. */
export async function retryPast503(url: string, key: string): Promise<TestResponse> {
  for (let attempt = 0; ; attempt++) {
    const res = await order(url, key);
    if (res.status !== 503 || attempt >= 40) return res;
    await sleep(250);
  }
}

/** Resolves once every key's call has reached the upstream (it was claimed), before any answered. */
export function untilUpstreamHas(
  upstream: CountingUpstream,
  keys: readonly string[],
): Promise<boolean> {
  return until(() => keys.every((key) => upstream.runs(key) > 0), 'every call to reach upstream', {
    intervalMs: 5,
  });
}

/**
 * Sends each url its keys and cuts PostgreSQL off while their upstream calls run: once every one
 * has reached the upstream, before any has answered. Every client gets its 201 all the same.
 */
export async function answeredDuringCut(
  upstream: CountingUpstream,
  targets: readonly (readonly [url: string, keys: readonly string[]])[],
  cut: () => void | Promise<void>,
): Promise<Map<string, TestResponse>> {
  const sent = targets.flatMap(([url, keys]) =>
    keys.map(async (key) => [key, await order(url, key)] as const),
  );
  await untilUpstreamHas(
    upstream,
    targets.flatMap(([, keys]) => keys),
  );
  await cut();
  const firsts = new Map(await Promise.all(sent));
  for (const [key, res] of firsts) {
    // The upstream answered, so the client has it, whatever the store could do.
    expect({ key, status: res.status }).toEqual({ key, status: 201 });
  }
  return firsts;
}
