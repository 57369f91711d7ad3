// Forwards protected requests with undici: one keep-alive Pool per upstream, the body already in
// memory (it was needed for the fingerprint), the response body left as a stream for the caller.
import type { Readable } from 'node:stream';
import { Pool } from 'undici';
import type { UpstreamConfig } from '../config/types';

export interface OutgoingRequest {
  readonly method: string;
  /** Path and query as sent upstream. */
  readonly path: string;
  readonly headers: Record<string, string | string[]>;
  readonly body: Buffer;
}

export interface UpstreamResponse {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly body: Readable & { dump?: () => Promise<void> };
}

export class UpstreamPools {
  private readonly pools = new Map<string, Pool>();

  constructor(upstreams: Iterable<UpstreamConfig>) {
    for (const upstream of upstreams) {
      this.pools.set(
        upstream.name,
        new Pool(upstream.origin, {
          // Keep idle sockets a little shorter than Node's default server keepAliveTimeout (5 s), so we
          // do not reuse a socket the upstream is closing: on a POST that race would be an unknown outcome.
          keepAliveTimeout: 4_000,
          keepAliveMaxTimeout: 60_000,
          connectTimeout: 5_000,
          pipelining: 1,
        }),
      );
    }
  }

  async request(upstream: UpstreamConfig, request: OutgoingRequest): Promise<UpstreamResponse> {
    const pool = this.pools.get(upstream.name);
    if (!pool) throw new Error(`no pool for upstream ${upstream.name}`);
    const response = await pool.request({
      method: request.method as 'POST',
      path: request.path,
      headers: request.headers,
      body: request.body.length > 0 || request.method !== 'GET' ? request.body : null,
      headersTimeout: upstream.timeoutMs,
      bodyTimeout: upstream.timeoutMs,
      // A client that hangs up must not cancel the upstream call (SPEC §7): no abort signal here.
    });
    return {
      status: response.statusCode,
      headers: response.headers as Record<string, string | string[] | undefined>,
      body: response.body as unknown as UpstreamResponse['body'],
    };
  }

  async close(): Promise<void> {
    await Promise.all([...this.pools.values()].map((pool) => pool.close()));
  }
}
