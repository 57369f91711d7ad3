// `serve` runs under the serving flags however it was started: node without flags restarts itself
// in place with them (the same process id), its cluster workers run with them too, and an
// operator's own choice is kept.
import fs from 'node:fs';
import { SERVING_HEAP_FLAGS } from '../../src/heap-tuning';
import { until } from '../support/eventually';
import { startProxyProcess } from '../support/proxy-process';
import { uniqueTable } from '../support/proxy';
import { startUpstream, type TestUpstream } from '../support/upstream';

let upstream: TestUpstream;

beforeAll(async () => {
  upstream = await startUpstream();
});

afterAll(async () => {
  await upstream?.close();
});

const yaml = (workers = 1) => `
listen: { host: 127.0.0.1, port: "\${PROXY_PORT}" }
workers: ${workers}
admin: { host: 127.0.0.1, port: "\${ADMIN_PORT}" }
store: { table: ${uniqueTable('serving_heap')} }
upstreams: { api: { url: ${upstream.url} } }
routes: [{ name: all, match: { path: /** }, upstream: api }]
`;

/** The command line the process runs now, read from /proc (Linux, as the suite's machines are). */
function commandLine(pid: number): string[] {
  return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
}

/** The command lines of the process's children that run node (its workers, not a PostgreSQL). */
function nodeChildren(pid: number): string[][] {
  const children = fs.readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim();
  return children
    .split(/\s+/)
    .filter(Boolean)
    .map((child) => commandLine(Number(child)))
    .filter((args) => args[0] === process.execPath);
}

test('node started without flags serves with the serving flags, in the same process', async () => {
  const proxy = await startProxyProcess({
    yaml: yaml(),
    env: { NODE_OPTIONS: '', LOG_LEVEL: 'debug', LOG_FORMAT: 'json' },
  });
  try {
    const args = commandLine(proxy.child.pid!);
    expect(args.slice(1, 1 + SERVING_HEAP_FLAGS.length)).toEqual([...SERVING_HEAP_FLAGS]);
    expect(args.slice(-3)).toEqual(['serve', '--config', proxy.configFile]);
    expect((await fetch(`${proxy.url}/ping`)).ok).toBe(true);
    // With `gc` defined, the garbage of starting was collected before it listened.
    const collected = proxy
      .output()
      .split('\n')
      .filter((line) => line.includes('collected the garbage of starting'))
      .map((line) => JSON.parse(line) as { heapBytesBefore: number; heapBytesAfter: number });
    expect(collected).toHaveLength(1);
    expect(collected[0]!.heapBytesAfter).toBeLessThan(collected[0]!.heapBytesBefore);
  } finally {
    expect(await proxy.kill()).toBe(0);
  }
});

test('cluster workers run with the serving flags the primary restarted with', async () => {
  const proxy = await startProxyProcess({ yaml: yaml(2), env: { NODE_OPTIONS: '' } });
  try {
    const workers = nodeChildren(proxy.child.pid!);
    expect(workers).toHaveLength(2);
    for (const args of workers)
      expect(args).toEqual(expect.arrayContaining([...SERVING_HEAP_FLAGS]));
    expect((await fetch(`${proxy.url}/ping`)).ok).toBe(true);
  } finally {
    expect(await proxy.kill()).toBe(0);
  }
});

test("an operator's own heap size is kept, and only the other flags are added", async () => {
  const proxy = await startProxyProcess({
    yaml: yaml(),
    env: { NODE_OPTIONS: '--max-old-space-size=300' },
  });
  try {
    const args = commandLine(proxy.child.pid!);
    expect(args.slice(1, 3)).toEqual(['--no-concurrent-marking', '--expose-gc']);
    expect(args.some((arg) => arg.startsWith('--max-semi-space-size'))).toBe(false);
    expect(args.some((arg) => arg.startsWith('--max-old-space-size'))).toBe(false);
    expect((await fetch(`${proxy.url}/ping`)).ok).toBe(true);
  } finally {
    expect(await proxy.kill()).toBe(0);
  }
});

test('an operator who chose all three keeps the command line node was started with', async () => {
  const proxy = await startProxyProcess({
    yaml: yaml(),
    nodeArgs: ['--concurrent-marking', '--expose-gc'],
    env: { NODE_OPTIONS: '--max-semi-space-size=16' },
  });
  try {
    const args = commandLine(proxy.child.pid!);
    expect(args.filter((arg) => arg.startsWith('--'))).toEqual([
      '--concurrent-marking',
      '--expose-gc',
      '--config',
    ]);
    expect((await fetch(`${proxy.url}/ping`)).ok).toBe(true);
  } finally {
    expect(await proxy.kill()).toBe(0);
  }
});

/** The heap-bound counter on the admin's /metrics (summed over workers by the primary). */
async function heapCollections(adminUrl: string): Promise<number> {
  const text = await (await fetch(`${adminUrl}/metrics`)).text();
  const line = text
    .split('\n')
    .find((l) => l.startsWith('idempotency_proxy_heap_collections_total'));
  if (line === undefined) throw new Error(`no heap_collections_total in /metrics:\n${text}`);
  return Number(line.split(' ').pop());
}

/** Twenty requests at once: each leaves garbage behind. */
async function twentyPings(url: string): Promise<void> {
  await Promise.all(Array.from({ length: 20 }, () => fetch(`${url}/ping`).then((r) => r.text())));
}

/** Polls until the proxy has collected for its heapTarget at least once; the count then. */
async function collectedOnce(adminUrl: string, url: string): Promise<number> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    // A 1 MB target is passed by what starting alone keeps alive.
    await twentyPings(url);
    const count = await heapCollections(adminUrl);
    if (count > 0) return count;
    if (Date.now() > deadline) throw new Error('no collection for heapTarget within 20 s');
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

test('a heap past heapTarget is collected, counted on /metrics and logged at debug level', async () => {
  const proxy = await startProxyProcess({
    yaml: `${yaml()}heapTarget: 1mb\n`,
    env: { NODE_OPTIONS: '', LOG_LEVEL: 'debug', LOG_FORMAT: 'json' },
  });
  try {
    expect(await collectedOnce(proxy.adminUrl, proxy.url)).toBeGreaterThan(0);
    // The collection is counted at once and its line written with the log's next batch: the
    // counter can be read before the line reaches the output.
    const logged = await until(() => {
      const lines = proxy
        .output()
        .split('\n')
        .filter((line) => line.includes('heap past heapTarget'))
        .map((line) => JSON.parse(line) as { pauseMs: number; usedBytesBefore: number });
      return lines.length > 0 && lines;
    }, 'the debug line of a heapTarget collection');
    expect(logged[0]!.usedBytesBefore).toBeGreaterThan(1024 * 1024);
    expect(logged[0]!.pauseMs).toBeGreaterThan(0);
  } finally {
    expect(await proxy.kill()).toBe(0);
  }
});

test('each cluster worker bounds its own heap', async () => {
  const proxy = await startProxyProcess({
    yaml: `${yaml(2)}heapTarget: 1mb\n`,
    env: { NODE_OPTIONS: '' },
  });
  try {
    expect(await collectedOnce(proxy.adminUrl, proxy.url)).toBeGreaterThan(0);
  } finally {
    expect(await proxy.kill()).toBe(0);
  }
});

test('heapTarget: 0b collects nothing', async () => {
  const proxy = await startProxyProcess({
    yaml: `${yaml()}heapTarget: 0b\n`,
    env: { NODE_OPTIONS: '' },
  });
  try {
    // The same traffic and more than the time that made the 1 MB target collect above.
    for (let round = 0; round < 10; round++) {
      await twentyPings(proxy.url);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(await heapCollections(proxy.adminUrl)).toBe(0);
  } finally {
    expect(await proxy.kill()).toBe(0);
  }
});
