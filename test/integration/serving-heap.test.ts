// `serve` runs under the serving heap sizes however it was started: node without flags restarts
// itself in place with them (the same process id), and an operator's own size is kept.
import fs from 'node:fs';
import { SERVING_HEAP_FLAGS } from '../../src/heap-tuning';
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

const yaml = () => `
listen: { host: 127.0.0.1, port: "\${PROXY_PORT}" }
admin: { host: 127.0.0.1, port: "\${ADMIN_PORT}" }
store: { table: ${uniqueTable('serving_heap')} }
upstreams: { api: { url: ${upstream.url} } }
routes: [{ name: all, match: { path: /** }, upstream: api }]
`;

/** The command line the process runs now, read from /proc (Linux, as the suite's machines are). */
function commandLine(pid: number): string[] {
  return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
}

test('node started without flags serves with the serving heap sizes, in the same process', async () => {
  const proxy = await startProxyProcess({ yaml: yaml(), env: { NODE_OPTIONS: '' } });
  try {
    const args = commandLine(proxy.child.pid!);
    expect(args.slice(1, 1 + SERVING_HEAP_FLAGS.length)).toEqual([...SERVING_HEAP_FLAGS]);
    expect(args.slice(-3)).toEqual(['serve', '--config', proxy.configFile]);
    expect((await fetch(`${proxy.url}/ping`)).ok).toBe(true);
  } finally {
    expect(await proxy.kill()).toBe(0);
  }
});

test("an operator's own heap size is kept, and nothing is added to it", async () => {
  const proxy = await startProxyProcess({
    yaml: yaml(),
    env: { NODE_OPTIONS: '--max-old-space-size=300' },
  });
  try {
    const args = commandLine(proxy.child.pid!);
    expect(args.some((arg) => arg.startsWith('--max-semi-space-size'))).toBe(false);
    expect(args.some((arg) => arg.startsWith('--max-old-space-size'))).toBe(false);
    expect((await fetch(`${proxy.url}/ping`)).ok).toBe(true);
  } finally {
    expect(await proxy.kill()).toBe(0);
  }
});
