// Summarises a V8 .cpuprofile (node --cpu-prof) into self time per function and per module, over
// the measured window only: profile timestamps and process.hrtime() both read CLOCK_MONOTONIC, so
// the bench passes the window it measured and start-up and warm-up samples are left out.
import fs from 'node:fs';
import path from 'node:path';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
}

interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

export interface SelfTime {
  readonly name: string;
  readonly ms: number;
  /** Share of the busy (non-idle) samples. */
  readonly percent: number;
}

export interface ProfileSummary {
  readonly file: string;
  /** Whether the samples were cut to the measured window (false: whole profile). */
  readonly windowed: boolean;
  readonly sampledMs: number;
  readonly busyMs: number;
  readonly idlePercent: number;
  readonly functions: SelfTime[];
  readonly modules: SelfTime[];
}

/** Window bounds in µs of CLOCK_MONOTONIC (process.hrtime.bigint() / 1000). */
export function summariseProfile(
  file: string,
  window?: { fromUs: number; toUs: number },
  top = 15,
): ProfileSummary {
  const profile = JSON.parse(fs.readFileSync(file, 'utf8')) as CpuProfile;
  const nodes = new Map(profile.nodes.map((node) => [node.id, node]));
  const root = path.resolve(__dirname, '..', '..');

  const collect = (useWindow: boolean) => {
    const byFunction = new Map<string, number>();
    const byModule = new Map<string, number>();
    let sampled = 0;
    let idle = 0;
    let at = profile.startTime;
    for (let i = 0; i < profile.samples.length; i++) {
      at += profile.timeDeltas[i] ?? 0;
      // A sample stands for the time until the next one.
      const us = profile.timeDeltas[i + 1] ?? 0;
      if (useWindow && window && (at < window.fromUs || at > window.toUs)) continue;
      const node = nodes.get(profile.samples[i] ?? -1);
      if (!node) continue;
      sampled += us;
      const { functionName, url, lineNumber } = node.callFrame;
      if (functionName === '(idle)') {
        idle += us;
        continue;
      }
      const where = url ? ` ${shortUrl(url, root)}:${lineNumber + 1}` : '';
      const fn = `${functionName || '(anonymous)'}${where}`;
      byFunction.set(fn, (byFunction.get(fn) ?? 0) + us);
      const module = moduleOf(functionName, url, root);
      byModule.set(module, (byModule.get(module) ?? 0) + us);
    }
    return { byFunction, byModule, sampled, idle };
  };

  let windowed = window !== undefined;
  let data = collect(windowed);
  if (windowed && data.sampled === 0) {
    windowed = false;
    data = collect(false);
  }
  const busy = data.sampled - data.idle;
  const rank = (map: Map<string, number>): SelfTime[] =>
    [...map.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([name, us]) => ({
        name,
        ms: Math.round(us / 100) / 10,
        percent: busy > 0 ? Math.round((1000 * us) / busy) / 10 : 0,
      }));
  return {
    file,
    windowed,
    sampledMs: Math.round(data.sampled / 1000),
    busyMs: Math.round(busy / 1000),
    idlePercent: data.sampled > 0 ? Math.round((1000 * data.idle) / data.sampled) / 10 : 0,
    functions: rank(data.byFunction),
    modules: rank(data.byModule),
  };
}

function shortUrl(url: string, root: string): string {
  const file = url.startsWith('file://') ? decodeURIComponent(url.slice('file://'.length)) : url;
  const inModules = file.lastIndexOf('/node_modules/');
  if (inModules !== -1) return file.slice(inModules + '/node_modules/'.length);
  if (file.startsWith(root)) return path.relative(root, file);
  // A --baseline build lives in the baseline cache: name its files as the current build's are.
  const baseline = /\/idempotency-proxy-baseline\/[0-9a-f]{40}\/(.*)$/.exec(file);
  return baseline ? baseline[1]! : file;
}

/** node_modules package, proxy source file, node core module, or V8's pseudo-frames. */
function moduleOf(functionName: string, url: string, root: string): string {
  if (!url) return functionName.startsWith('(') ? functionName : '(native)';
  if (url.startsWith('node:')) {
    const name = url.slice('node:'.length);
    return `node:${name.startsWith('internal/') ? name.split('/').slice(0, 2).join('/') : name}`;
  }
  const short = shortUrl(url, root);
  if (short !== url && !short.startsWith('dist/') && !short.startsWith('/')) {
    const parts = short.split('/');
    return (parts[0]?.startsWith('@') ? parts.slice(0, 2) : parts.slice(0, 1)).join('/');
  }
  return short;
}

export function formatProfile(label: string, summary: ProfileSummary): string {
  const lines = [
    `${label}: ${summary.busyMs} ms busy of ${summary.sampledMs} ms sampled (${summary.idlePercent}% idle)` +
      `${summary.windowed ? ', measured window only' : ', whole profile'}`,
    `  ${path.relative(process.cwd(), summary.file)}`,
    '  self time by module:',
    ...summary.modules.map((entry) => `    ${pad(entry.percent)}%  ${entry.name}`),
    '  self time by function:',
    ...summary.functions.map((entry) => `    ${pad(entry.percent)}%  ${entry.name}`),
  ];
  return lines.join('\n');
}

const pad = (percent: number): string => percent.toFixed(1).padStart(5);
