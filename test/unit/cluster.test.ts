// The pure parts of `workers` > 1: when a dead worker is replaced, how the console's counters of
// several processes add up, what a clear reports of the workers it asked, and how the setting is read.
import os from 'node:os';
import { clusterForget, FORGET_TIMEOUT_MS } from '../../src/cluster/cluster-forget';
import { mergeOutcomeCounters } from '../../src/cluster/cluster-metrics';
import type { Question } from '../../src/cluster/messages';
import type { Answer } from '../../src/cluster/questions';
import { recordDigest } from '../../src/store/record';
import { MAX_EXITS, RespawnPolicy, WINDOW_MS } from '../../src/cluster/respawn-policy';
import { parseConfigText } from '../../src/compiler/load';
import { restartOnlyChanges } from '../../src/runtime';
import { OutcomeRing } from '../../src/observability/outcome-ring';

describe('RespawnPolicy', () => {
  it('replaces the first exit at once, then backs off, doubling up to 10 s', () => {
    const policy = new RespawnPolicy(() => 0);
    const delays = Array.from({ length: 8 }, () => policy.afterExit());
    expect(delays.map((d) => (d.respawn ? d.delayMs : 'give up'))).toEqual([
      0, 250, 500, 1_000, 2_000, 4_000, 8_000, 10_000,
    ]);
  });

  it(`gives up past ${MAX_EXITS} exits within a minute`, () => {
    const policy = new RespawnPolicy(() => 0);
    for (let i = 0; i < MAX_EXITS; i++) expect(policy.afterExit().respawn).toBe(true);
    expect(policy.afterExit()).toEqual({ respawn: false, recentExits: MAX_EXITS + 1 });
  });

  it('forgets exits older than the window: a worker that dies once a day is always replaced at once', () => {
    let now = 0;
    const policy = new RespawnPolicy(() => now);
    for (let i = 0; i < 20; i++) {
      expect(policy.afterExit()).toEqual({ respawn: true, delayMs: 0, recentExits: 1 });
      now += WINDOW_MS;
    }
  });
});

describe('mergeOutcomeCounters', () => {
  it('adds the processes bucket by bucket and in the totals', () => {
    let now = 1_000_000;
    const a = new OutcomeRing(10_000, 3, () => now);
    const b = new OutcomeRing(10_000, 3, () => now);
    a.add('executed');
    b.add('executed');
    b.add('replayed');
    now += 10_000;
    a.add('replayed');
    const merged = mergeOutcomeCounters([a.snapshot(), b.snapshot()]);
    expect(merged.buckets.map((bucket) => bucket.counts)).toEqual([
      {},
      { executed: 2, replayed: 1 },
      { replayed: 1 },
    ]);
    expect(merged.totals).toEqual({ executed: 2, replayed: 2 });
  });

  it('keeps the newest buckets when snapshots straddle a bucket boundary', () => {
    let now = 1_000_000;
    const ring = new OutcomeRing(10_000, 3, () => now);
    ring.add('executed');
    const before = ring.snapshot();
    now += 10_000;
    ring.add('replayed');
    const merged = mergeOutcomeCounters([before, ring.snapshot()]);
    expect(merged.buckets).toHaveLength(3);
    expect(merged.buckets.at(-1)!.counts).toEqual({ replayed: 1 });
    expect(merged.totals).toEqual({ executed: 2, replayed: 1 });
  });
});

describe('clusterForget', () => {
  const ids = [
    { scope: 'jobs', tenant: '', key: 'a' },
    { scope: 'jobs', tenant: '', key: 'b' },
  ];

  it('asks every worker once for all the records, by their NOTIFY digests, with the deadline', async () => {
    const asked: [Question, number][] = [];
    const forget = clusterForget((question, timeoutMs) => {
      asked.push([question, timeoutMs]);
      return Promise.resolve([
        { workerId: 1, pid: 101, value: true },
        { workerId: 2, pid: 102, value: true },
      ]);
    });
    expect(await forget(ids)).toEqual({ asked: 2, forgot: 2, unconfirmed: [] });
    expect(asked).toEqual([
      [{ what: 'forget', digests: ids.map(recordDigest) }, FORGET_TIMEOUT_MS],
    ]);
  });

  it('names the workers that did not confirm; one that exited holds nothing and counts as done', async () => {
    const answers: Answer[] = [
      { workerId: 1, pid: 101, value: true },
      { workerId: 2, pid: 102, error: 'it exited before answering', exited: true },
      { workerId: 3, pid: 103, error: `no answer within ${FORGET_TIMEOUT_MS} ms` },
    ];
    const forget = clusterForget(() => Promise.resolve(answers));
    expect(await forget(ids)).toEqual({
      asked: 3,
      forgot: 2,
      unconfirmed: [{ workerPid: 103, reason: `no answer within ${FORGET_TIMEOUT_MS} ms` }],
    });
  });

  it('with no worker serving, there is nothing to wait for', async () => {
    const forget = clusterForget(() => Promise.resolve([]));
    expect(await forget(ids)).toEqual({ asked: 0, forgot: 0, unconfirmed: [] });
  });
});

describe('the workers setting', () => {
  const yaml = (line: string): string =>
    `${line}\nupstreams: { app: { url: "http://127.0.0.1:4000" } }\nroutes: [{ name: r, match: { path: /r }, upstream: app }]\n`;

  it('is 1 by default, a number as written, and one per core for "auto"', () => {
    expect(parseConfigText(yaml(''), 'proxy.yaml', {}).workers).toBe(1);
    expect(parseConfigText(yaml('workers: 4'), 'proxy.yaml', {}).workers).toBe(4);
    expect(parseConfigText(yaml('workers: "3"'), 'proxy.yaml', {}).workers).toBe(3);
    expect(parseConfigText(yaml('workers: auto'), 'proxy.yaml', {}).workers).toBe(
      os.availableParallelism(),
    );
  });

  it.each(['0', '-1', '1.5', '1025', 'x', 'true', '[2]'])(
    'refuses workers: %s with its line',
    (value) => {
      expect(() => parseConfigText(yaml(`workers: ${value}`), 'proxy.yaml', {})).toThrow(
        'proxy.yaml:1:10 workers: expected "auto" (one per core) or a number of processes from 1 to 1024',
      );
    },
  );

  it('needs a restart to change', () => {
    const one = parseConfigText(yaml('workers: 1'), 'proxy.yaml', {});
    const two = parseConfigText(yaml('workers: 2'), 'proxy.yaml', {});
    expect(restartOnlyChanges(one, two)).toEqual(['workers']);
  });
});
