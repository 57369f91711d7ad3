// The adapter contract: what the protected pipeline (pipeline.ts) needs from a protocol, and what it
// hands one. The pipeline knows claims, leases, forwarding and settling; an adapter knows how its
// requests are read and how its answers are written. Each protocol is one folder that exports one
// adapter object (rest/, mcp/, a2a/; the last two on the shared JSON-RPC base in jsonrpc/), and the
// adapters are registered where the app is composed (src/protocols.ts). Nothing here, in the
// pipeline or in the reconciler imports a protocol: they are handed the route's adapter.
//
//   read(request) ─┬─ protect: the call ─► the pipeline claims, forwards, settles; the adapter's
//                  │                        receive / replay / refuse / attach write the answers
//                  ├─ pass: forwarded unstored by the pipeline (streamed when the body is unread)
//                  └─ refuse: the adapter's answer written here, nothing forwarded
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { IdempotencyPolicy, RouteConfig } from '../config/types';
import type { ProxyError } from '../errors';
import type { OutcomeLabel } from '../http/request-log';
import type { RequestTarget } from '../http/router';
import type { RequestTrace } from '../observability/tracing';
import type { JwtPrincipals } from '../auth/jwt-principals';
import { scopeOf } from '../idempotency/scope';
import { type Claims, tenantHash } from '../idempotency/tenant';
import type { LiveAnswer } from '../store/live-answer';
import type { Handle, HandleState, HandleStore } from '../store/handles';
import type {
  HeaderPairs,
  PartialAnswer,
  RecordId,
  RequestStore,
  StoredResponse,
} from '../store/record';
import type { PassThrough } from '../upstream/passthrough';
import type { ResponseReceiver, UpstreamPools } from '../upstream/protected';
import type { Prober, ReconcileLabel, ReconcileProbe } from '../reconcile/resolution';
import type { Settlement, ShadowVerdict } from './decide';

export const OUTCOME_HEADER = 'idempotency-outcome';
export const BODY_OMITTED_HEADER = 'idempotent-body-omitted';
export const EXPIRES_HEADER = 'Idempotency-Expires';

let lastExpiry: { at: number; header: HeaderPairs } = { at: NaN, header: [] };

/**
 * Idempotency-Expires for an answer stored until `expiresAt` (the database's expiry): an HTTP date
 * (RFC 9110 §5.6.7), rounded down to the second, so a client knows how long a retry replays it.
 * None for an answer not stored. A storm of replays of one record formats its date once.
 */
export function expiresHeader(expiresAt: number | undefined): HeaderPairs {
  if (expiresAt === undefined) return [];
  if (lastExpiry.at !== expiresAt)
    lastExpiry = { at: expiresAt, header: [[EXPIRES_HEADER, new Date(expiresAt).toUTCString()]] };
  return lastExpiry.header;
}

export interface ProtectedDeps {
  /** The store with every memory shortcut in front (store/coalescing-store.ts). */
  readonly store: RequestStore;
  readonly upstreams: UpstreamPools;
  readonly passThrough: PassThrough;
  readonly onStoreError: (error: unknown, operation: string) => void;
  /** Verifies bearer tokens for routes scoped by a claim (auth.jwt); undefined without auth.jwt. */
  readonly principals?: JwtPrincipals;
  /** Metrics hooks (src/metrics.ts, where the app is composed); the pipeline itself knows no metrics library. */
  readonly observer?: ProtectedObserver;
  /** Asks the upstream about unknown outcomes on routes with idempotency.reconcile. */
  readonly reconciler?: Prober;
  /** The handles of long calls (long-calls.ts); without it no call is deferred. */
  readonly handles?: HandleStore;
}

export interface ProtectedObserver {
  /** One store round trip (or a wait, operation 'wait'), with its error if it failed. */
  storeCall(operation: string, ms: number, error: unknown): void;
  /** +1 when this instance starts forwarding under a claim, -1 when it has stored or released it. */
  claimsHeld(delta: 1 | -1): void;
}

/** Where a protected request's time went, for its log line; added to as it goes. */
export interface Timings {
  store: number;
  upstream: number;
  wait: number;
  /** performance.now() when the request arrived. */
  readonly startedAt: number;
  /** A streamed answer: ms from the request's arrival to its first body byte sent to the client. */
  firstByte?: number;
}

export interface ProtectedRequest {
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  readonly route: RouteConfig;
  readonly policy: IdempotencyPolicy;
  readonly target: RequestTarget;
  readonly timings: Timings;
  /** The request's spans when tracing is on (observability/tracing.ts); undefined when off. */
  readonly trace?: RequestTrace;
  /**
   * The verified token's claims, on a route scoped by a claim: set once, by the principal step
   * (principal.ts), before the call is read.
   */
  principal?: Claims;
}

/** A protected request as read by its protocol: what is claimed, matched and forwarded. */
export interface Call {
  readonly id: RecordId;
  /** The route's policy, or for a derived key the policy with key.window as its ttl. */
  readonly policy: IdempotencyPolicy;
  readonly keyDerived: boolean;
  /**
   * What a repeat must match. May be computed on first read (and throw UnreadableCall then: a body
   * the fingerprint cannot read), since a repeat resent byte for byte is answered by its bytes.
   */
  readonly fingerprint: Buffer;
  /** The raw fingerprint (fingerprint.ts) of a call under a sent key, when it is enforced. */
  readonly raw?: Buffer;
  /** The body as it goes upstream. */
  readonly body: Buffer;
  /** The tool of an MCP tools/call, for the log. */
  readonly tool?: string;
  /** Set when the client takes a handle for a call the upstream is slow to answer (long-calls.ts). */
  readonly deferral?: Deferral;
}

/** How a call may be answered with a handle (docs/long-calls.md). */
export interface Deferral {
  /** How long the upstream has to answer before the client gets the handle instead. */
  readonly afterMs: number;
  /**
   * A repeat of the call while it runs gets the handle too (an MCP task), instead of what the
   * route's onConcurrent says (REST's 409, or a wait).
   */
  readonly joinRunning: boolean;
  /**
   * How often the proxy running a call that outlived `after` looks whether a cancel was asked for
   * (on any instance), and if so stops it upstream; undefined: calls are not cancelled (REST).
   */
  readonly cancelCheckMs?: number;
}

/** A poll of a long call's handle (a status monitor's GET, an MCP tasks/get or tasks/cancel). */
export interface Poll {
  /** The record: the key from the handle's token, the scope and tenant from the poller's request. */
  readonly id: RecordId;
  /** The secret the token carries: the handle's, or the poll finds nothing. */
  readonly secret: string;
  /** A cancel (MCP tasks/cancel): asked for first, when the call still runs. */
  readonly cancel?: boolean;
  /** The answer stored for a call whose outcome is unknown, as the protocol writes it. */
  unknownOutcome(error: ProxyError): StoredResponse;
  /** Writes what the poll found; undefined: no such handle for this poller (or it expired). */
  answer(res: ServerResponse, found: HandleState | undefined): void;
  /** Writes one of the proxy's failures (the store unreachable). */
  fail(res: ServerResponse, error: ProxyError): void;
}

/**
 * The record a call with `key` claims under `policy` (its scope, and the request's tenant). A route
 * scoped by path (an ACP profile's: identity + endpoint path) adds the request path to its scope.
 */
export function recordIdOf(
  request: ProtectedRequest,
  policy: Pick<IdempotencyPolicy, 'scope' | 'tenant' | 'scopeByPath'>,
  key: string,
): RecordId {
  // req.headers only when a tenant reads it: Node builds it on first read (http/header-lines.ts).
  const tenant =
    policy.tenant.length === 0
      ? ''
      : tenantHash(request.req.headers, policy.tenant, request.principal);
  return { scope: scopeOf(policy, request.target.path), tenant, key };
}

/**
 * What became of a protected request: the pipeline's (or its protocol's) one result, from which the
 * app writes the request's log line and metrics.
 */
export interface Outcome {
  readonly label: OutcomeLabel;
  readonly key?: string;
  readonly keyDerived?: boolean;
  readonly tool?: string;
  /** The record's attempts as the claim counted them (unset when memory answered). */
  readonly attempts?: number;
  /** Answered by the replay cache, or by this process's first request of the key. */
  readonly from?: 'cache' | 'leader';
  readonly outcomeUnknown?: boolean;
  readonly shadow?: ShadowVerdict;
  /**
   * The completion or release was not simply stored: `queued` (the store keeps sending it; an answer
   * went to the client before it was in the record), `stale` (the claim had been taken over), or
   * `failed` (the store gave up on it).
   */
  readonly landing?: 'queued' | 'stale' | 'failed';
  /** What a reconcile probe this request made (or waited for) said (docs/reconcile.md). */
  readonly reconcile?: ReconcileLabel;
  /** Bytes of a streamed answer sent to the client (kept when it broke off, for the operator). */
  readonly streamedBytes?: number;
}

/**
 * Thrown when reading a call's fingerprint finds the request cannot be read after all (a sent key's
 * fingerprint is computed only when memory cannot answer by its bytes): refused, unforwarded.
 */
export class UnreadableCall extends Error {
  constructor(readonly problem: ProxyError) {
    super(problem.message);
    this.name = 'UnreadableCall';
  }
}

/**
 * What a protocol makes of a request: a call to protect; a message to pass on unstored (with the
 * body it read, or streamed as it comes when `body` is unset), and what the log says once the
 * upstream has answered; or a refusal the adapter answers itself (`answer` writes it: a refusal,
 * a held cancel, or nothing for a client that left).
 */
export type Verdict<C extends Call> =
  | { readonly kind: 'protect'; readonly call: C }
  | {
      readonly kind: 'pass';
      readonly outcome: Outcome;
      readonly body?: Buffer;
      /** The key forwarded with it (under forwardKeyAs), if any. */
      readonly key?: string;
      /** Forwarded with the route's key header as the client sent it, instead of `key`. */
      readonly keyAsSent?: boolean;
      /** Changes the upstream's answer on its way to the client (a new one for each answer). */
      readonly reshape?: () => AnswerReshaper;
    }
  | {
      readonly kind: 'refuse';
      readonly outcome: Outcome;
      readonly answer: (res: ServerResponse) => void;
    }
  | { readonly kind: 'poll'; readonly poll: Poll };

/**
 * Changes a passed message's answer as it goes to the client (MCP: the tasks extension added to the
 * server's capabilities). The answer is sent chunked, without the upstream's Content-Length.
 */
export interface AnswerReshaper {
  /** The headers the client gets (the upstream's, Content-Length already dropped or not). */
  headers(status: number, headers: HeaderPairs): HeaderPairs;
  /** The bytes the client gets for a chunk of the upstream's body (none yet: undefined). */
  data(chunk: Buffer): Buffer | undefined;
  /** What is left to send once the upstream's body ended. */
  end(): Buffer | undefined;
}

/**
 * An adapter's `read` from a function that reads with promises (MCP, A2A): a repeat memory answers
 * is answered in the turn its verdict arrives, one promise after its body ended.
 */
export function readsWithPromises<C extends Call>(
  read: (request: ProtectedRequest) => Promise<Verdict<C>>,
): ProtocolAdapter<C>['read'] {
  return (request, verdict, failed) => void read(request).then(verdict, failed);
}

/** How one protocol reads its requests and writes the proxy's answers: one object per protocol. */
export interface ProtocolAdapter<C extends Call> {
  /** For the log and the docs: `rest`, `mcp`, `a2a`. */
  readonly name: string;
  /** True for the routes this protocol serves (its block in the route's idempotency policy). */
  serves(policy: IdempotencyPolicy): boolean;
  /**
   * Reads the request into a verdict, given to `verdict` once (or `failed`, for an error that is no
   * fault of the request). It forwards nothing and answers nothing itself: the pipeline does both,
   * as the verdict says. A verdict given in the turn the body ended lets a repeat that memory
   * answers be answered in that turn, with no promise on its way (pipeline.ts); an adapter that
   * reads with promises is wrapped by readsWithPromises.
   */
  read(
    request: ProtectedRequest,
    verdict: (verdict: Verdict<C>) => void,
    failed: (error: unknown) => void,
  ): void;
  /** A stored answer: to a repeat (`replayed`), or to the request that made it itself. */
  replay(request: ProtectedRequest, call: C, stored: StoredResponse, replayed: boolean): void;
  /** One of the proxy's own refusals or failures. */
  refuse(request: ProtectedRequest, call: C, error: ProxyError): void;
  /** The answer stored for a call that may have run upstream (Idempotency-Outcome: unknown). */
  unknownOutcome(call: C, error: ProxyError): StoredResponse;
  /** What a key reused for something else is told. */
  readonly reusedDetail: string;
  /**
   * Takes the upstream's answer to a claimed call. `settle` completes or releases the claim (it
   * never rejects); a receiver may call it itself as soon as the answer decides it. `live`, under
   * onConcurrent: attach: where a receiver that streams the answer publishes it for repeats.
   */
  receive(
    request: ProtectedRequest,
    call: C,
    settle: (settlement: Settlement) => Promise<void>,
    live?: LiveAnswer,
  ): AnswerReceiver;
  /**
   * Writes the answer another request of this process is streaming to this repeat's client (what
   * was sent so far, then the rest live); resolves how it ended. Undefined when the answer can no
   * longer be joined (or the protocol attaches to nothing): the repeat claims again, and waits.
   */
  attach?(request: ProtectedRequest, call: C, live: LiveAnswer): Promise<AttachEnd> | undefined;
  /** Answers a call with its handle instead of the upstream's answer (one with a `deferral`). */
  deferred?(request: ProtectedRequest, call: C, handle: Handle): void;
  /**
   * How the reconciler asks this protocol's upstream whether an unknown outcome happened
   * (idempotency.reconcile); undefined where the protocol has no probe.
   */
  readonly probe?: ReconcileProbe;
}

/** How an attached repeat's answer ended: whole, cut with the first's, or its client left. */
export type AttachEnd = 'ended' | 'failed' | 'gone';

export interface AnswerReceiver extends ResponseReceiver {
  /** The upstream's status once its head arrived; 0 before. */
  readonly status: number;
  /** True once the client has the head (a stream, or an answer too large to keep whole). */
  readonly streaming: boolean;
  /** Bytes of the body the client has been sent as they came; undefined when none was streamed. */
  readonly streamedBytes?: number;
  /** True once the receiver has settled the claim itself. */
  readonly settled: boolean;
  /**
   * What arrived of an answer that broke off after its head (up to maxResponseBytes), kept with its
   * unknown outcome for the operator; undefined before the head, or where nothing is kept.
   */
  partial?(): PartialAnswer | undefined;
  /** The settlement for an answer that has ended. */
  settlement(): Settlement;
  /**
   * Finishes the client's answer; called once the claim is settled. `expiresAt`: when the stored
   * answer expires (Idempotency-Expires, where the head is still to be written); unset when it was
   * not stored.
   */
  end(expiresAt?: number): void;
  /** Ends a streamed answer that broke off (`error` says why), once the claim is settled. */
  endBroken(error: ProxyError): void;
  /**
   * The client was answered otherwise (with a handle: long-calls.ts): from now on the answer is
   * captured and settled as for a client that left, and nothing is written to the client.
   */
  detach(): void;
  /** The forward is over, however it ended. */
  close(): void;
}

/** base64url characters of a handle's secret (18 random bytes). */
const SECRET_LENGTH = 24;
const SECRET = /^[A-Za-z0-9_-]{24}$/;
/** A key is at most 255 visible ASCII characters: 340 base64url ones. */
const MAX_TOKEN_LENGTH = SECRET_LENGTH + 340;

/**
 * A handle's public token: its secret, then the record's key. The poller's route gives the scope and
 * the poller's own credentials the tenant, so the token carries neither, and another tenant's poll
 * finds no record.
 */
export function handleToken(handle: Handle, key: string): string {
  return handle.secret + Buffer.from(key, 'latin1').toString('base64url');
}

/** A token read back into its secret and key; undefined for one no handle could have. */
export function readHandleToken(token: string): { secret: string; key: string } | undefined {
  if (token.length <= SECRET_LENGTH || token.length > MAX_TOKEN_LENGTH) return undefined;
  const secret = token.slice(0, SECRET_LENGTH);
  const encoded = token.slice(SECRET_LENGTH);
  if (!SECRET.test(secret) || !/^[A-Za-z0-9_-]+$/.test(encoded)) return undefined;
  const key = Buffer.from(encoded, 'base64url').toString('latin1');
  if (!/^[\x21-\x7e]{1,255}$/.test(key)) return undefined;
  return { secret, key };
}
