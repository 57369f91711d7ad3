// What the proxy's memory is made of at the end of a scenario's measured window, read from its own
// metrics (prom-client's default process metrics and nodejs_array_buffers_bytes): the JavaScript
// heap (and its young generation, which --max-semi-space-size sizes), the memory outside it, and
// the Buffers inside that. RSS less heap and external is code, the runtime's own and the allocator's
// slack. A build without one of the metrics leaves that part out.

export interface MemoryParts {
  readonly rssBytes?: number;
  readonly heapUsedBytes?: number;
  readonly heapTotalBytes?: number;
  /** The young generation's reserved size (`new` heap space). */
  readonly newSpaceBytes?: number;
  /** The old generation's and large objects' reserved size (`old` and `large_object` spaces). */
  readonly oldSpaceBytes?: number;
  readonly externalBytes?: number;
  readonly arrayBuffersBytes?: number;
}

const PREFIX = 'idempotency_proxy_';

/** Reads the parts from `adminUrl`'s /metrics; undefined when it cannot be read. */
export async function readMemoryParts(adminUrl: string): Promise<MemoryParts | undefined> {
  let text: string;
  try {
    const response = await fetch(`${adminUrl}/metrics`, { signal: AbortSignal.timeout(5_000) });
    if (!response.ok) return undefined;
    text = await response.text();
  } catch {
    return undefined;
  }
  const value = (name: string, labels = ''): number | undefined => {
    const line = text
      .split('\n')
      .find((candidate) => candidate.startsWith(`${PREFIX}${name}${labels} `));
    const parsed = line === undefined ? Number.NaN : Number(line.slice(line.lastIndexOf(' ') + 1));
    return Number.isFinite(parsed) ? parsed : undefined;
  };
  const space = (name: string) => value('nodejs_heap_space_size_total_bytes', `{space="${name}"}`);
  const old = space('old');
  const large = space('large_object');
  return {
    rssBytes: value('process_resident_memory_bytes'),
    heapUsedBytes: value('nodejs_heap_size_used_bytes'),
    heapTotalBytes: value('nodejs_heap_size_total_bytes'),
    newSpaceBytes: space('new'),
    oldSpaceBytes: old === undefined ? undefined : old + (large ?? 0),
    externalBytes: value('nodejs_external_memory_bytes'),
    arrayBuffersBytes: value('nodejs_array_buffers_bytes'),
  };
}

/** "RSS 180 MB = heap 96 MB (young 64, old 28, used 61) + external 22 MB (buffers 18) + 62 MB other". */
export function formatMemoryParts(parts: MemoryParts): string {
  const mb = (bytes: number | undefined): string =>
    bytes === undefined ? '?' : (bytes / 1024 / 1024).toFixed(0);
  const { rssBytes, heapTotalBytes, externalBytes } = parts;
  const other =
    rssBytes !== undefined && heapTotalBytes !== undefined && externalBytes !== undefined
      ? ` + ${mb(rssBytes - heapTotalBytes - externalBytes)} MB other`
      : '';
  return (
    `RSS ${mb(rssBytes)} MB = heap ${mb(heapTotalBytes)} MB (young ${mb(parts.newSpaceBytes)}, ` +
    `old ${mb(parts.oldSpaceBytes)}, used ${mb(parts.heapUsedBytes)}) + external ` +
    `${mb(externalBytes)} MB (buffers ${mb(parts.arrayBuffersBytes)})${other}`
  );
}
