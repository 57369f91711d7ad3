// Reads a sampling heap profile (allocation-sampler.ts) and prints what was allocated per request,
// by module and by function: `node dist/bench/allocation-summary.js FILE REQUESTS`, REQUESTS being
// how many the sampled window served (the scenario's req/s times the window, as near as the bench
// tells). The shares within one profile are exact to the sampling; the per-request bytes are only
// as good as REQUESTS.
import fs from 'node:fs';
import path from 'node:path';

interface SampledNode {
  callFrame: { functionName: string; url: string; lineNumber: number };
  selfSize: number;
  children?: SampledNode[];
}

/** node_modules' package, our dist file, Node's own, or the native frame's name. */
function moduleOf({ url, functionName }: SampledNode['callFrame']): string {
  const packaged = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (packaged) return packaged[1]!;
  const ours = /\/dist\/(.+)$/.exec(url);
  if (ours) return `dist/${ours[1]}`;
  if (url.startsWith('node:')) return 'node';
  return url === '' ? `(native ${functionName || 'anonymous'})` : url;
}

function main(): void {
  const [file, requestsText] = process.argv.slice(2);
  const requests = Number(requestsText);
  if (file === undefined || !(requests > 0)) {
    process.stderr.write('usage: node dist/bench/allocation-summary.js FILE REQUESTS\n');
    process.exit(2);
  }
  const { head } = JSON.parse(fs.readFileSync(file, 'utf8')) as { head: SampledNode };
  const byModule = new Map<string, number>();
  const byFunction = new Map<string, number>();
  const add = (map: Map<string, number>, name: string, bytes: number): void => {
    map.set(name, (map.get(name) ?? 0) + bytes);
  };
  let total = 0;
  const stack = [head];
  for (let node = stack.pop(); node !== undefined; node = stack.pop()) {
    const frame = node.callFrame;
    total += node.selfSize;
    add(byModule, moduleOf(frame), node.selfSize);
    const where = frame.url === '' ? '' : ` ${path.basename(frame.url)}:${frame.lineNumber + 1}`;
    add(byFunction, `${frame.functionName || '(anonymous)'}${where}`, node.selfSize);
    stack.push(...(node.children ?? []));
  }
  const lines = (map: Map<string, number>, count: number): string[] =>
    [...map]
      .sort((a, b) => b[1] - a[1])
      .slice(0, count)
      .map(([name, bytes]) => {
        const perRequest = Math.round(bytes / requests).toLocaleString('en-US');
        return `${perRequest.padStart(8)} B  ${((bytes / total) * 100).toFixed(1).padStart(5)} %  ${name}`;
      });
  process.stdout.write(
    `${(total / 1e6).toFixed(1)} MB sampled, ${Math.round(total / requests).toLocaleString('en-US')} B per request\n` +
      `by module:\n${lines(byModule, 20).join('\n')}\n` +
      `by function:\n${lines(byFunction, 25).join('\n')}\n`,
  );
}

main();
