// The raw fingerprint (a repeat recognised by its bytes): what it tells apart, and that its one-pass
// framing writes exactly the fields it stands for. The oracle frames them here, independently of
// fingerprint.ts: each field its 8-byte big-endian length, then its bytes.
import { createHash } from 'node:crypto';
import fc from 'fast-check';
import type { FingerprintPolicy, RequestPart } from '../../src/config/types';
import {
  canonicalQueryPairs,
  computeFingerprint,
  type FingerprintInput,
  isJsonContentType,
} from '../../src/idempotency/fingerprint';
import { computeRawFingerprint } from '../../src/idempotency/raw-fingerprint';
import { ALL_PARTS, paymentRequest } from '../support/fingerprint-request';

const input = paymentRequest;

const policy = (parts: RequestPart[] = ALL_PARTS): FingerprintPolicy => ({ parts, ignore: [] });

const raw = (body: string, overrides: Partial<FingerprintInput> = {}): string =>
  computeRawFingerprint(input(overrides), policy(), { bytes: Buffer.from(body) }).toString('hex');

const fp = (overrides: Partial<FingerprintInput> = {}): string =>
  computeFingerprint(input(overrides), policy()).toString('hex');

/**
 * The raw fingerprint's fields (the body's bytes, or their digest). A policy of method, path, query
 * and body parts only has its tags first, then the request's fields; any other has each part's tags
 * before its fields.
 */
function expectedFraming(
  request: FingerprintInput,
  parts: RequestPart[],
  body: Buffer,
  digested: boolean,
): Buffer {
  const tags: string[] = [];
  const values: (string | Buffer)[] = [];
  const interleaved: (string | Buffer)[] = [];
  const part = (partTags: string[], partValues: (string | Buffer)[]): void => {
    tags.push(...partTags);
    values.push(...partValues);
    interleaved.push(...partTags, ...partValues);
  };
  const listed = (values: readonly (string | Buffer)[] | undefined): (string | Buffer)[] =>
    values === undefined ? ['absent'] : ['present', String(values.length), ...values];
  let bodyDone = false;
  for (const each of parts) {
    switch (each.kind) {
      case 'method':
        part(['method'], [request.method.toUpperCase()]);
        break;
      case 'path':
        part(['path'], [request.path]);
        break;
      case 'query': {
        const pairs = canonicalQueryPairs(request.query).flat();
        part(['query'], [String(pairs.length), ...pairs]);
        break;
      }
      case 'header': {
        const value = request.headers[each.name];
        const values =
          value === undefined ? undefined : typeof value === 'string' ? [value] : value;
        part(['header', each.name], listed(values));
        break;
      }
      case 'query-param': {
        const name = Buffer.from(each.name);
        const values = canonicalQueryPairs(request.query)
          .filter(([pairName]) => pairName.equals(name))
          .map(([, value]) => value);
        part(['query-param', each.name], listed(values.length === 0 ? undefined : values));
        break;
      }
      default: {
        if (bodyDone) break;
        bodyDone = true;
        const mode = isJsonContentType(request.contentType) ? 'json' : 'bytes';
        part([digested ? 'body-sha256' : 'body-bytes', mode], [body]);
      }
    }
  }
  const byLayout = parts.every((each) => each.kind !== 'header' && each.kind !== 'query-param');
  const fields = [
    'idempotency-proxy/fingerprint-raw/v1',
    ...(byLayout ? [...tags, ...values] : interleaved),
  ];
  return Buffer.concat(
    fields.map((field) => {
      const bytes = typeof field === 'string' ? Buffer.from(field, 'utf8') : field;
      const length = Buffer.alloc(8);
      length.writeBigUInt64BE(BigInt(bytes.length));
      return Buffer.concat([length, bytes]);
    }),
  );
}

const anyText = fc.oneof(
  fc.string({ maxLength: 80, size: 'max' }),
  fc.string({ unit: 'binary', maxLength: 80, size: 'max' }),
  fc.string({ minLength: 60, maxLength: 200 }),
);
const anyPart: fc.Arbitrary<RequestPart> = fc.oneof(
  fc.constantFrom<RequestPart>(
    { kind: 'method' },
    { kind: 'path' },
    { kind: 'query' },
    { kind: 'body' },
    { kind: 'raw-body' },
    { kind: 'body-field', path: ['a'] },
  ),
  fc.constantFrom('x-tenant', 'x-missing').map((name): RequestPart => ({ kind: 'header', name })),
  fc.constantFrom('a', 'b').map((name): RequestPart => ({ kind: 'query-param', name })),
);
const anyRequest: fc.Arbitrary<FingerprintInput> = fc.record({
  method: fc.oneof(fc.constantFrom('POST', 'post', 'Put', 'DELETE'), anyText),
  path: fc.oneof(fc.constantFrom('/payments', '/a;b', '/ü/€'), anyText),
  query: fc.oneof(fc.constantFrom('', 'a=1&b=2', 'b=2&a=%41', 'a'), anyText),
  headers: fc.oneof(
    fc.constant({}),
    fc.record({ 'x-tenant': fc.oneof(anyText, fc.array(anyText, { maxLength: 3 })) }),
  ),
  body: fc.uint8Array({ maxLength: 300, size: 'max' }).map((bytes) => Buffer.from(bytes)),
  contentType: fc.constantFrom(undefined, 'application/json', 'text/plain', 'application/x+json'),
});

describe('raw fingerprint', () => {
  test('frames exactly the fields it stands for, for any parts and request', () => {
    fc.assert(
      fc.property(anyRequest, fc.array(anyPart, { maxLength: 7 }), (request, parts) => {
        const framed = computeRawFingerprint(request, policy(parts), { bytes: request.body });
        expect(framed.toString('hex')).toBe(
          expectedFraming(request, parts, request.body, false).toString('hex'),
        );
        const sha256 = createHash('sha256').update(request.body).digest();
        const digest = computeRawFingerprint(request, policy(parts), { sha256 });
        const expected = createHash('sha256')
          .update(expectedFraming(request, parts, sha256, true))
          .digest();
        expect(digest.toString('hex')).toBe(expected.toString('hex'));
      }),
      { numRuns: 500 },
    );
  });

  test('frames a request the same however many routes it alternates with', () => {
    // The framing of each policy is worked out once and remembered: a remembered one must never
    // stand for another policy's.
    const policies = [
      policy(),
      policy([{ kind: 'body' }]),
      policy([{ kind: 'path' }, { kind: 'method' }]),
    ];
    const request = input({ query: 'a=1' });
    for (let round = 0; round < 3; round++) {
      for (const each of policies) {
        const parts = each.parts as RequestPart[];
        expect(computeRawFingerprint(request, each, { bytes: request.body })).toEqual(
          expectedFraming(request, parts, request.body, false),
        );
      }
    }
  });

  test('equal raw fingerprints mean equal fingerprints', () => {
    // The property the replay cache relies on: a raw match never stands for a different request.
    const jsonText = fc.oneof(
      fc.json(),
      fc.constantFrom('{"a":1,"a":2}', '{"a":1}', '{ "a" : 1 }', '[1,2]', 'not json'),
    );
    fc.assert(
      fc.property(jsonText, jsonText, fc.constantFrom('', 'x=1', 'x=2'), (one, two, query) => {
        if (raw(one, { query }) !== raw(two, { query })) return;
        expect(one).toBe(two);
      }),
    );
  });

  test('tells apart what the fingerprint tells apart, and the spellings it does not', () => {
    const body = '{"amount":100,"currency":"EUR"}';
    expect(raw(body)).toBe(raw(body));
    expect(raw(body)).not.toBe(raw(body, { path: '/refunds' }));
    expect(raw(body)).not.toBe(raw(body, { method: 'PUT' }));
    expect(raw(body)).not.toBe(raw(body, { contentType: 'text/plain' }));
    // The same canonical request spelled otherwise: its own raw fingerprint, the same fingerprint.
    const respelled = '{ "currency": "EUR", "amount": 100 }';
    expect(raw(respelled)).not.toBe(raw(body));
    expect(fp({ body: Buffer.from(respelled) })).toBe(fp({ body: Buffer.from(body) }));
  });

  test("a body's bytes and a digest of them never frame alike", () => {
    const bytes = createHash('sha256').update('{}').digest();
    const asBytes = computeRawFingerprint(input(), policy(), { bytes });
    const asDigest = computeRawFingerprint(input(), policy(), { sha256: bytes });
    expect(asBytes.equals(asDigest)).toBe(false);
  });
});
