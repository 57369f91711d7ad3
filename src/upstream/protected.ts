// Forwards protected requests with undici: one keep-alive Pool per upstream, the body already in
// memory (it was needed for the fingerprint), the answer handed to a receiver as it arrives. The same
// pools carry pass-through requests (passthrough.ts): one upstream engine, one set of sockets.
import type { IncomingHttpHeaders } from 'node:http';
import { type Dispatcher, Pool } from 'undici';
import type { UpstreamConfig } from '../config/types';

export interface OutgoingRequest {
  readonly method: string;
  /** Path and query as sent upstream. */
  readonly path: string;
  readonly headers: Record<string, string | string[]>;
  readonly body: Buffer;
}

/**
 * Takes an upstream's answer as undici reads it. Most answers are a few hundred bytes kept whole,
 * so no stream, async iterator or promise per chunk sits between the socket and the proxy.
 */
export interface ResponseReceiver {
  /** The final status and headers (informational 1xx answers are skipped). Must not throw. */
  head(status: number, headers: IncomingHttpHeaders): void;
  /** A piece of the body; a returned promise pauses reading until it settles. Must not throw. */
  data(chunk: Buffer): Promise<void> | undefined;
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

  /** The upstream's pool, for pass-through forwarding (its own handler, streamed both ways). */
  dispatcher(upstream: UpstreamConfig): Dispatcher {
    const pool = this.pools.get(upstream.name);
    if (!pool) throw new Error(`no pool for upstream ${upstream.name}`);
    return pool;
  }

  /**
   * Sends the request and feeds the answer to `receiver`; settles when the body has ended, or rejects
   * with undici's error — before receiver.head if the upstream never answered, after it if the answer
   * broke off.
   */
  send(
    upstream: UpstreamConfig,
    request: OutgoingRequest,
    receiver: ResponseReceiver,
  ): Promise<void> {
    const pool = this.pools.get(upstream.name);
    if (!pool) return Promise.reject(new Error(`no pool for upstream ${upstream.name}`));
    return new Promise((resolve, reject) => {
      const options: Dispatcher.DispatchOptions = {
        method: request.method as Dispatcher.HttpMethod,
        path: request.path,
        headers: request.headers,
        body: request.body.length > 0 || request.method !== 'GET' ? request.body : null,
        headersTimeout: upstream.timeoutMs,
        bodyTimeout: upstream.timeoutMs,
        // A client that hangs up must not cancel the upstream call (SPEC §7): nothing aborts it.
      };
      pool.dispatch(options, {
        onRequestStart() {},
        onResponseStart(_controller, status, headers) {
          if (status >= 200) receiver.head(status, headers);
        },
        onResponseData(controller, chunk) {
          const written = receiver.data(chunk);
          if (written === undefined) return;
          controller.pause();
          const resume = (): void => controller.resume();
          void written.then(resume, resume);
        },
        onResponseEnd() {
          resolve();
        },
        onResponseError(_controller, error) {
          reject(error);
        },
      });
    });
  }

  async close(): Promise<void> {
    await Promise.all([...this.pools.values()].map((pool) => pool.close()));
  }
}
