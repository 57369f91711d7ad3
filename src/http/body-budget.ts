// How many bytes of request bodies the proxy holds in memory at once. A protected route reads a
// body whole before it forwards it (to fingerprint it, and to resend it on a retry), so a hundred
// 1 MB uploads during a slow store were a hundred megabytes of buffers, and nothing bounded how
// many there could be. Each such request reserves the bytes its body may take before it is read:
// its Content-Length, or the route's limit when the body is chunked. A request that does not fit is
// answered 503 with Retry-After at once, before its body is read; its client retries with the same
// key and loses nothing. Waiting instead would hold its socket and the kernel's buffers all the same.
//
// A whole reservation up front, not bytes as they arrive: bodies half read, each waiting for room
// the others hold, would wait for one another forever.

import { contentLengthOf, type HeaderFacts } from './header-lines';

export class BodyBudget {
  private heldBytes = 0;

  /** A reload may change the limit; bodies already admitted keep their room. */
  constructor(public limitBytes: number) {}

  /** Bytes reserved by requests in flight. */
  get held(): number {
    return this.heldBytes;
  }

  /**
   * Reserves room for a body of at most `bytes`: the bytes to give back with release(), or
   * undefined when they do not fit. A budget holding nothing takes any one body, so a route whose
   * limit is larger than the budget still gets its requests through, one at a time.
   */
  reserve(bytes: number): number | undefined {
    if (bytes <= 0) return 0;
    if (this.heldBytes > 0 && this.heldBytes + bytes > this.limitBytes) return undefined;
    this.heldBytes += bytes;
    return bytes;
  }

  release(bytes: number): void {
    this.heldBytes -= bytes;
  }
}

/**
 * The most a request's body can hold in memory under a limit of `limitBytes`: none for a request
 * without a body, its Content-Length when it states one, the limit when it is chunked. A body
 * larger than the limit is refused with 413 as soon as that is known, so the limit is the most.
 */
export function bodyBytesToReserve(
  headers: Pick<HeaderFacts, 'contentLength' | 'transferEncoding'>,
  limitBytes: number,
): number {
  const length = headers.contentLength;
  if (length !== undefined) {
    const stated = contentLengthOf(length);
    return Number.isSafeInteger(stated) && stated >= 0 ? Math.min(stated, limitBytes) : limitBytes;
  }
  return headers.transferEncoding === undefined ? 0 : limitBytes;
}
