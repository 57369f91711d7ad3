// What both conformance suites run against: the fixture upstream, and the real proxy in front of it
// with one protected route for every path; the suites differ only in the idempotency settings. With
// several instances (one table, as behind a load balancer), each request goes to the next one in
// turn: the runner opens a connection per request, and a round-robin TCP balancer spreads them.
import { startBridge } from '../support/tcp-forwarder';
import { startProxy, type TestProxy, uniqueTable } from '../support/proxy';
import { type FixtureUpstream, startFixtureUpstream } from './fixture-upstream';
import { runVectors, type RunTarget, type Vector } from './vector-runner';

export interface ConformanceTarget {
  readonly fixture: FixtureUpstream;
  /** The first instance. */
  readonly proxy: TestProxy;
  readonly proxies: readonly TestProxy[];
  readonly target: RunTarget;
  close(): Promise<void>;
}

/** `defaultsYaml` is the body of the config's `defaults:` block (indented two spaces), or ''. */
export async function startConformanceTarget(
  defaultsYaml: string,
  ttlMs: number,
  instances = 1,
): Promise<ConformanceTarget> {
  const fixture = await startFixtureUpstream();
  const table = uniqueTable();
  const start = (): Promise<TestProxy> =>
    startProxy({
      table,
      yaml: `
store:
  table: \${TEST_TABLE}
upstreams:
  fixture: { url: ${fixture.url}, timeout: 10s }
${defaultsYaml ? `defaults:\n${defaultsYaml}` : ''}
routes:
  - name: fixture
    match: { path: /** }
    upstream: fixture
    idempotency:
      key: { required: true }
`,
    });
  const proxies: TestProxy[] = [];
  for (let i = 0; i < instances; i++) proxies.push(await start());
  let next = 0;
  const balancer =
    instances > 1
      ? await startBridge('tcp:127.0.0.1:0', () => {
          const url = new URL(proxies[next++ % proxies.length]!.url);
          return `tcp:${url.hostname}:${url.port}`;
        })
      : undefined;
  const proxyUrl = balancer ? `http://127.0.0.1:${balancer.port}` : proxies[0]!.url;
  return {
    fixture,
    proxy: proxies[0]!,
    proxies,
    target: { proxyUrl, fixtureUrl: fixture.url, ttlMs },
    async close() {
      await balancer?.close();
      for (const proxy of proxies) await proxy.close();
      await fixture.close();
    },
  };
}

/** The ids of the vectors that pass against the fixture with no proxy in front (the runner's control). */
export async function barePassIds(
  vectors: readonly Vector[],
  fixtureUrl: string,
  ttlMs?: number,
): Promise<string[]> {
  const bare = await runVectors(vectors, { proxyUrl: fixtureUrl, fixtureUrl, ttlMs });
  return bare.filter((result) => result.status === 'pass').map((result) => result.id);
}
