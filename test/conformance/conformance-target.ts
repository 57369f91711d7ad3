// What both conformance suites run against: the fixture upstream, and the real proxy in front of it
// with one protected route for every path; the suites differ only in the idempotency settings.
import { startProxy, type TestProxy } from '../support/proxy';
import { type FixtureUpstream, startFixtureUpstream } from './fixture-upstream';
import { runVectors, type RunTarget, type Vector } from './vector-runner';

export interface ConformanceTarget {
  readonly fixture: FixtureUpstream;
  readonly proxy: TestProxy;
  readonly target: RunTarget;
  close(): Promise<void>;
}

/** `defaultsYaml` is the body of the config's `defaults:` block (indented two spaces), or ''. */
export async function startConformanceTarget(
  defaultsYaml: string,
  ttlMs: number,
): Promise<ConformanceTarget> {
  const fixture = await startFixtureUpstream();
  const proxy = await startProxy({
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
  return {
    fixture,
    proxy,
    target: { proxyUrl: proxy.url, fixtureUrl: fixture.url, ttlMs },
    async close() {
      await proxy.close();
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
