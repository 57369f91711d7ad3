// Forwards protected requests with undici: one keep-alive Pool per upstream, the body already in
// memory (it was needed for the fingerprint), the answer handed to a receiver as it arrives. The
// same pools carry pass-through requests (passthrough.ts): one upstream engine, one set of sockets.
import type { IncomingHttpHeaders } from 'node:http';
import { buildConnector, type Dispatcher, Pool } from 'undici';
import type tls from 'node:tls';
import type { UpstreamConfig, UpstreamTlsConfig } from '../config/types';
import { tlsFailureReason } from './transport-errors';

export interface OutgoingRequest {
  readonly method: string;
  /** Path and query as sent upstream. */
  readonly path: string;
  readonly headers: Record<string, string | string[]>;
  readonly body: Buffer;
}

/** Handed the means to stop a request once it is sent (its promise rejects with `reason`). */
export type Abortable = (abort: (reason: Error) => void) => void;

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

/**
 * An upstream's TLS settings as Node's tls.connect options: for the undici pool and the websocket
 * agent alike, so every path to one upstream trusts the same CA and shows the same certificate. A
 * `ca` replaces the system's CAs (as Node's does), it does not add to them.
 */
export function upstreamTlsOptions(config: UpstreamTlsConfig): tls.ConnectionOptions {
  return {
    ...(config.ca ? { ca: config.ca.pem } : {}),
    ...(config.cert && config.key ? { cert: config.cert.pem, key: config.key.pem } : {}),
    ...(config.servername ? { servername: config.servername } : {}),
    rejectUnauthorized: config.rejectUnauthorized,
  };
}

const CONNECT_TIMEOUT_MS = 5_000;

/**
 * undici's connector with the upstream's TLS settings, and one correction: when a TLS 1.3 server
 * refuses the handshake after the client's last flight (a client certificate it requires), the
 * alert arrives as a socket error that undici then replaces with "other side closed" — which reads
 * as a connection lost after sending, an unknown outcome. Ending the socket with the TLS error
 * keeps that error, so the failure is classified as what it is: nothing was accepted.
 */
function tlsConnector(upstream: UpstreamConfig): buildConnector.connector {
  const connect = buildConnector({
    ...(upstream.tls ? upstreamTlsOptions(upstream.tls) : {}),
    timeout: CONNECT_TIMEOUT_MS,
  });
  return (options, callback) =>
    connect(options, (error, socket) => {
      socket?.on('error', (socketError: Error & { code?: string }) => {
        if (socketError.code !== undefined && tlsFailureReason(socketError.code) !== undefined)
          socket.destroy(socketError);
      });
      // The callback's overloads take (error, null) or (null, socket).
      (callback as (error: Error | null, socket: unknown) => void)(error, socket);
    });
}

type AnswerHeaders = Parameters<NonNullable<Dispatcher.DispatchHandler['onResponseStart']>>[2];

/**
 * undici's handler for one protected request: the answer to the receiver, the end or the error to
 * the send's promise. One object per request, its methods shared.
 */
export class ReceiverHandler implements Dispatcher.DispatchHandler {
  constructor(
    private readonly receiver: ResponseReceiver,
    private readonly resolve: () => void,
    private readonly reject: (error: Error) => void,
    private readonly abortable: Abortable | undefined,
  ) {}

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.abortable?.((reason) => controller.abort(reason));
  }

  onResponseStart(
    _controller: Dispatcher.DispatchController,
    status: number,
    headers: AnswerHeaders,
  ): void {
    if (status >= 200) this.receiver.head(status, headers);
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    const written = this.receiver.data(chunk);
    if (written === undefined) return;
    controller.pause();
    const resume = (): void => controller.resume();
    void written.then(resume, resume);
  }

  onResponseEnd(): void {
    this.resolve();
  }

  onResponseError(_controller: Dispatcher.DispatchController, error: Error): void {
    this.reject(error);
  }
}

export class UpstreamPools {
  private readonly pools = new Map<string, Pool>();

  constructor(upstreams: Iterable<UpstreamConfig>) {
    for (const upstream of upstreams) {
      this.pools.set(
        upstream.name,
        new Pool(upstream.origin, {
          // Keep idle sockets a little shorter than Node's default server keepAliveTimeout (5 s),
          // so we do not reuse a socket the upstream is closing: on a POST that race would be an
          // unknown outcome.
          keepAliveTimeout: 4_000,
          keepAliveMaxTimeout: 60_000,
          connectTimeout: CONNECT_TIMEOUT_MS,
          pipelining: 1,
          ...(upstream.origin.startsWith('https:') ? { connect: tlsConnector(upstream) } : {}),
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
   * Sends the request and feeds the answer to `receiver`; settles when the body has ended, or
   * rejects with undici's error — before receiver.head if the upstream never answered, after it if
   * the answer broke off.
   */
  send(
    upstream: UpstreamConfig,
    request: OutgoingRequest,
    receiver: ResponseReceiver,
    abortable?: Abortable,
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
        // A client that hangs up must not cancel the upstream call (docs/README.md#small-rules):
        // only a cancel asked for by name does (a long call's, through `abortable`).
      };
      pool.dispatch(options, new ReceiverHandler(receiver, resolve, reject, abortable));
    });
  }

  async close(): Promise<void> {
    await Promise.all([...this.pools.values()].map((pool) => pool.close()));
  }
}
