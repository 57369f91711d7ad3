// The raw fingerprint: how a repeat is recognised by its bytes, without canonical JSON
// (README.md#what-a-client-sees-on-a-protected-route). Most of what agents retry is resent byte for
// byte, so nearly every cached replay is matched by it, and it is framed on every protected request.
//
// Its fields are the fingerprint's parts, framed as fingerprint.ts frames them (length-prefixed),
// in one pass: a policy's layout — the domain and every part's tags, framed once — comes first,
// and each request writes its method, path, query pairs and body after it into one buffer. Field
// by field through FramedHash, each tag before its part, it cost about 10k instructions, a tenth
// of a cached replay. A policy with parts the layout has no slot for (a header, a query parameter)
// is framed that way still.
//
// A raw fingerprint is only compared with others of the same policy (memory is keyed by the policy,
// store/record.ts memoryKey), so what matters is that one policy's framing tells any two requests
// apart: the tags are the same for all of them, and the fields after them are length-prefixed in
// the order the policy fixes.
import { hash } from 'node:crypto';
import type { FingerprintPolicy } from '../config/types';
import {
  canonicalQueryPairs,
  type FingerprintInput,
  FramedHash,
  frameField,
  isJsonContentType,
  utf8Length,
} from './fingerprint';

/** From this size on a body is hashed as it arrives (http/body.ts): its raw fingerprint frames that digest. */
export const RAW_FINGERPRINT_MIN_BYTES = 16 * 1024;

/**
 * A body as a raw fingerprint sees it: its exact bytes, or for a large body the SHA-256 of them,
 * taken while it arrived.
 */
export type RawBody = { readonly bytes: Buffer } | { readonly sha256: Buffer };

const DOMAIN = 'fingerprint-raw/v1';

/**
 * A cheap stand-in for the fingerprint: the same parts, but the body's exact bytes (and whether it
 * counts as JSON) instead of its canonical form. Equal raw fingerprints mean equal fingerprints — the
 * same bytes have the same canonical form, the same duplicate keys — so a repeat that matches a known
 * raw fingerprint needs no canonical JSON; a different one says nothing. Retries are resent byte for
 * byte, so this is how almost every repeat is recognised: parsing and canonicalising a small JSON
 * body cost a cached replay more than answering it did.
 *
 * For a body given by its bytes the raw fingerprint is the framed input itself, not a digest of it:
 * it is only ever compared for equality, in memory, and a few hundred bytes compare for less than
 * they hash. Framing is injective, so equal framed inputs are equal requests; a framed input is
 * longer than any digest, so the two kinds never compare equal.
 */
export function computeRawFingerprint(
  input: FingerprintInput,
  policy: FingerprintPolicy,
  body: RawBody,
): Buffer {
  const json = isJsonContentType(input.contentType);
  const digested = 'sha256' in body;
  const layout = layoutOf(policy, json, digested);
  const framed =
    layout === null
      ? frameByFields(input, policy, json, digested ? body.sha256 : body.bytes, digested)
      : frameByLayout(layout, input, digested ? body.sha256 : body.bytes);
  return digested ? Buffer.from(hash('sha256', framed, 'binary'), 'latin1') : framed;
}

/** A request field the layout leaves room for. */
type Slot = 'method' | 'path' | 'query' | 'body';

/**
 * The raw framing of one policy, body mode and body kind: `tags` (the domain, then each part's tag
 * fields, framed once) and then the request's own fields, one slot after another.
 */
interface Layout {
  readonly tags: Buffer;
  readonly slots: readonly Slot[];
}

/** Per policy, its four layouts (json × digested), null where the fast way does not apply. */
const layouts = new WeakMap<FingerprintPolicy, (Layout | null)[]>();
let lastPolicy: FingerprintPolicy | undefined;
let lastLayouts: (Layout | null)[] = [];

function layoutOf(policy: FingerprintPolicy, json: boolean, digested: boolean): Layout | null {
  // A one-entry memo before the WeakMap: most requests are for the route the last one was for.
  let known = policy === lastPolicy ? lastLayouts : layouts.get(policy);
  if (known === undefined) layouts.set(policy, (known = []));
  lastPolicy = policy;
  lastLayouts = known;
  const index = (json ? 2 : 0) + (digested ? 1 : 0);
  let layout = known[index];
  if (layout === undefined) known[index] = layout = makeLayout(policy, json, digested);
  return layout;
}

function makeLayout(policy: FingerprintPolicy, json: boolean, digested: boolean): Layout | null {
  const tags = new FramedHash(DOMAIN);
  const slots: Slot[] = [];
  let bodyWritten = false;
  for (const part of policy.parts) {
    switch (part.kind) {
      case 'method':
      case 'path':
      case 'query':
        tags.field(part.kind);
        slots.push(part.kind);
        break;
      case 'body':
      case 'raw-body':
      case 'body-field':
        // The body's bytes stand for every part read from it, once.
        if (bodyWritten) break;
        bodyWritten = true;
        tags.field(digested ? 'body-sha256' : 'body-bytes').field(json ? 'json' : 'bytes');
        slots.push('body');
        break;
      default:
        return null;
    }
  }
  return { tags: tags.framed(), slots };
}

/** The layout's tags, then the request's fields, in one buffer. */
function frameByLayout(layout: Layout, input: FingerprintInput, body: Buffer): Buffer {
  const { tags, slots } = layout;
  const method = input.method.toUpperCase();
  const methodBytes = utf8Length(method);
  const pathBytes = utf8Length(input.path);
  const pairs = input.query === '' ? NO_PAIRS : canonicalQueryPairs(input.query).flat();
  const count = String(pairs.length);
  let total = tags.length;
  for (const slot of slots) {
    if (slot === 'method') total += 8 + methodBytes;
    else if (slot === 'path') total += 8 + pathBytes;
    else if (slot === 'body') total += 8 + body.length;
    else {
      total += 8 + count.length;
      for (const value of pairs) total += 8 + value.length;
    }
  }
  const framed = Buffer.allocUnsafe(total);
  framed.set(tags, 0);
  let at = tags.length;
  for (const slot of slots) {
    if (slot === 'method') at = frameField(framed, at, method, methodBytes);
    else if (slot === 'path') at = frameField(framed, at, input.path, pathBytes);
    else if (slot === 'body') at = frameField(framed, at, body, body.length);
    else {
      at = frameField(framed, at, count, count.length);
      for (const value of pairs) at = frameField(framed, at, value, value.length);
    }
  }
  return framed;
}

const NO_PAIRS: Buffer[] = [];

/**
 * Field by field, each part's tag before its fields: for a policy with parts the layouts have no
 * slot for (a header, a query parameter).
 */
function frameByFields(
  input: FingerprintInput,
  policy: FingerprintPolicy,
  json: boolean,
  body: Buffer,
  digested: boolean,
): Buffer {
  const framed = new FramedHash(DOMAIN);
  let bodyWritten = false;
  for (const part of policy.parts) {
    if (part.kind !== 'body' && part.kind !== 'body-field' && part.kind !== 'raw-body') {
      framed.part(part, input, policy.ignore);
    } else if (!bodyWritten) {
      bodyWritten = true;
      // A digest field and a bytes field are named apart, so they can never frame alike.
      framed
        .field(digested ? 'body-sha256' : 'body-bytes')
        .field(json ? 'json' : 'bytes')
        .field(body);
    }
  }
  return framed.framed();
}
