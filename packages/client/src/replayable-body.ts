// Request bodies that can be sent again, byte for byte, on every attempt. The proxy fingerprints the
// body: a retry whose bytes differ gets 422, and a body that cannot be read twice cannot be retried.

/**
 * A request body {@link idempotentFetch} can resend unchanged on every attempt: text, bytes, form
 * parameters, or a `Blob`. Not a stream (it can be read once) and not `FormData` (each send picks a
 * new random multipart boundary, so the bytes, hence the proxy's fingerprint, change: 422).
 */
export type ReplayableBody =
  string | Uint8Array | ArrayBuffer | ArrayBufferView | URLSearchParams | Blob;

/** What {@link snapshotBody} returns: views are copied into a `Uint8Array`. */
export type BodySnapshot = string | Uint8Array | ArrayBuffer | URLSearchParams | Blob;

/**
 * A snapshot of `body` that is safe to send on every attempt: bytes and parameters are copied, so
 * the caller changing them after the call cannot change what a retry sends.
 *
 * @throws TypeError for a stream, an async iterable, `FormData`, or any other kind of body.
 */
export function snapshotBody(body: unknown): BodySnapshot | undefined {
  if (body === undefined || body === null) return undefined;
  if (typeof body === 'string') return body;
  if (body instanceof URLSearchParams) return new URLSearchParams(body);
  if (body instanceof ArrayBuffer) return body.slice(0);
  if (ArrayBuffer.isView(body)) {
    return new Uint8Array(body.buffer, body.byteOffset, body.byteLength).slice();
  }
  if (typeof Blob !== 'undefined' && body instanceof Blob) return body; // immutable
  if (typeof FormData !== 'undefined' && body instanceof FormData) {
    throw new TypeError(
      'idempotentFetch cannot send FormData: every send picks a new multipart boundary, so a retry ' +
        'would carry different bytes and the proxy would answer 422 (key reused with a different ' +
        'request). Send URLSearchParams, or encode the multipart body once and pass its bytes.',
    );
  }
  if (isStreamLike(body)) {
    throw new TypeError(
      'idempotentFetch cannot send a stream body: a stream can be read only once, so a retry would ' +
        'have nothing to resend under the same key. Read it into a string, Buffer or Uint8Array first.',
    );
  }
  throw new TypeError(
    `idempotentFetch cannot send a body of type ${describe(body)}: pass a string, Buffer, ` +
      'Uint8Array, ArrayBuffer, URLSearchParams or Blob (for JSON: JSON.stringify(value)).',
  );
}

function isStreamLike(body: unknown): boolean {
  if (typeof body !== 'object' || body === null) return false;
  return (
    (typeof ReadableStream !== 'undefined' && body instanceof ReadableStream) ||
    typeof (body as { getReader?: unknown }).getReader === 'function' ||
    typeof (body as { pipe?: unknown }).pipe === 'function' ||
    Symbol.asyncIterator in body
  );
}

function describe(value: unknown): string {
  if (typeof value !== 'object' || value === null) return typeof value;
  return value.constructor?.name ?? 'object';
}
