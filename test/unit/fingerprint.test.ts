import { createHash } from 'node:crypto';
import fc from 'fast-check';
import type { FingerprintPolicy, RequestPart } from '../../src/config/types';
import { canonicalJson } from '../../src/idempotency/canonical-json';
import { deriveKey } from '../../src/idempotency/derived-key';
import {
  canonicalQueryPairs,
  computeFingerprint,
  FramedHash,
  isJsonContentType,
  type FingerprintInput,
} from '../../src/idempotency/fingerprint';
import { tenantHash } from '../../src/idempotency/tenant';
import { ALL_PARTS, paymentRequest } from '../support/fingerprint-request';

const input = paymentRequest;

function policy(parts: RequestPart[] = ALL_PARTS, ignore: string[][] = []): FingerprintPolicy {
  return { parts, ignore };
}

function fp(overrides: Partial<FingerprintInput> = {}, p: FingerprintPolicy = policy()): string {
  return computeFingerprint(input(overrides), p).toString('hex');
}

function jsonBody(text: string): Partial<FingerprintInput> {
  return { body: Buffer.from(text), contentType: 'application/json' };
}

describe('computeFingerprint', () => {
  it('returns a 32-byte SHA-256 digest', () => {
    expect(computeFingerprint(input(), policy())).toHaveLength(32);
  });

  it('is deterministic', () => {
    expect(fp()).toBe(fp());
  });

  it('frames fields exactly as documented (known-answer test: changing this orphans stored records)', () => {
    const field = (value: string | Buffer): Buffer => {
      const bytes = typeof value === 'string' ? Buffer.from(value, 'utf8') : value;
      const length = Buffer.alloc(8);
      length.writeBigUInt64BE(BigInt(bytes.length));
      return Buffer.concat([length, bytes]);
    };
    const expected = createHash('sha256')
      .update(
        Buffer.concat([
          field('idempotency-proxy/fingerprint/v1'),
          field('method'),
          field('POST'),
          field('path'),
          field('/p'),
          field('query'),
          field('4'),
          field('a'),
          field('1'),
          field('b'),
          field('2'),
          field('body'),
          field('json'),
          field('{"a":1}'),
          field('header'),
          field('x-run'),
          field('absent'),
          field('query-param'),
          field('b'),
          field('present'),
          field('1'),
          field('2'),
          field('body-field'),
          field('1'),
          field('a'),
          field('json'),
          field('1'),
        ]),
      )
      .digest('hex');
    const parts: RequestPart[] = [
      ...ALL_PARTS,
      { kind: 'header', name: 'x-run' },
      { kind: 'query-param', name: 'b' },
      { kind: 'body-field', path: ['a'] },
    ];
    expect(
      fp(
        { method: 'post', path: '/p', query: 'b=2&a=1', ...jsonBody('{ "a": 1.0 }') },
        policy(parts),
      ),
    ).toBe(expected);
  });

  it('depends on the order of the configured parts', () => {
    const a = policy([{ kind: 'method' }, { kind: 'path' }]);
    const b = policy([{ kind: 'path' }, { kind: 'method' }]);
    expect(fp({}, a)).not.toBe(fp({}, b));
  });

  it('hashes only the configured parts', () => {
    const onlyBody = policy([{ kind: 'body' }]);
    expect(fp({ path: '/a', method: 'PUT', query: 'x=1' }, onlyBody)).toBe(
      fp({ path: '/b' }, onlyBody),
    );
  });

  describe('method and path', () => {
    it('upper-cases the method', () => {
      expect(fp({ method: 'post' })).toBe(fp({ method: 'POST' }));
      expect(fp({ method: 'PUT' })).not.toBe(fp({ method: 'POST' }));
    });

    it('cannot confuse path "/a" + query "b" with path "/ab"', () => {
      const p = policy([{ kind: 'path' }, { kind: 'query' }]);
      expect(fp({ path: '/a', query: 'b' }, p)).not.toBe(fp({ path: '/ab', query: '' }, p));
    });

    it('hashes the path as received, without decoding it', () => {
      expect(fp({ path: '/a%2Fb' })).not.toBe(fp({ path: '/a/b' }));
    });
  });

  describe('query', () => {
    const q = policy([{ kind: 'query' }]);

    it('ignores the order of different names', () => {
      expect(fp({ query: 'a=1&b=2' }, q)).toBe(fp({ query: 'b=2&a=1' }, q));
    });

    it('keeps the order of repeated names', () => {
      expect(fp({ query: 'a=1&a=2' }, q)).not.toBe(fp({ query: 'a=2&a=1' }, q));
      expect(fp({ query: 'a=1&b=0&a=2' }, q)).toBe(fp({ query: 'b=0&a=1&a=2' }, q));
    });

    it('decodes percent-encoding and "+" consistently', () => {
      expect(fp({ query: '%41=%62' }, q)).toBe(fp({ query: 'A=b' }, q));
      expect(fp({ query: 'q=a+b' }, q)).toBe(fp({ query: 'q=a%20b' }, q));
      expect(fp({ query: 'q=a%2Bb' }, q)).not.toBe(fp({ query: 'q=a+b' }, q));
      expect(fp({ query: 'q=%C3%A9' }, q)).toBe(fp({ query: 'q=é' }, q));
    });

    it('keeps invalid UTF-8 escapes distinct instead of replacing them', () => {
      expect(fp({ query: 'q=%FF' }, q)).not.toBe(fp({ query: 'q=%FE' }, q));
    });

    it('keeps a malformed escape literally', () => {
      expect(fp({ query: 'q=%zz' }, q)).toBe(fp({ query: 'q=%25zz' }, q));
      expect(fp({ query: 'q=%4' }, q)).toBe(fp({ query: 'q=%254' }, q));
    });

    it('skips empty pieces and reads a bare name as an empty value', () => {
      expect(fp({ query: '&a=1&&b&' }, q)).toBe(fp({ query: 'a=1&b=' }, q));
    });

    it('distinguishes no query from an empty parameter', () => {
      expect(fp({ query: '' }, q)).not.toBe(fp({ query: 'a' }, q));
    });

    it('splits each pair at its first "="', () => {
      expect(canonicalQueryPairs('a=b=c').map(([n, v]) => [n.toString(), v.toString()])).toEqual([
        ['a', 'b=c'],
      ]);
    });

    it('cannot confuse a name with a value', () => {
      expect(fp({ query: 'ab=' }, q)).not.toBe(fp({ query: 'a=b' }, q));
    });
  });

  describe('body', () => {
    const b = policy([{ kind: 'body' }]);

    it('canonicalises a JSON body: key order and whitespace do not matter', () => {
      expect(fp(jsonBody('{"a":1,"b":2}'), b)).toBe(fp(jsonBody('{ "b": 2, "a": 1 }'), b));
    });

    it('treats equivalent number spellings and unicode escapes as equal', () => {
      expect(fp(jsonBody('{"a":1.0,"s":"\\u0041"}'), b)).toBe(fp(jsonBody('{"a":1,"s":"A"}'), b));
    });

    it('keeps big integers distinct', () => {
      expect(fp(jsonBody('{"id":12345678901234567890}'), b)).not.toBe(
        fp(jsonBody('{"id":12345678901234567891}'), b),
      );
    });

    it('changes when a value changes', () => {
      expect(fp(jsonBody('{"a":1}'), b)).not.toBe(fp(jsonBody('{"a":2}'), b));
    });

    it.each([
      'application/json',
      'Application/JSON',
      'application/json; charset=utf-8',
      'application/problem+json',
      'application/vnd.api+json;v=2',
      'APPLICATION/MERGE-PATCH+JSON',
    ])('treats %s as JSON', (contentType) => {
      expect(fp({ body: Buffer.from('{"b":2,"a":1}'), contentType }, b)).toBe(
        fp(jsonBody('{"a":1,"b":2}'), b),
      );
    });

    it('hashes a non-JSON content type as bytes, so formatting matters', () => {
      const text = { contentType: 'text/plain' };
      expect(fp({ ...text, body: Buffer.from('{"a":1,"b":2}') }, b)).not.toBe(
        fp({ ...text, body: Buffer.from('{"b":2,"a":1}') }, b),
      );
    });

    it('hashes a body without a content type as bytes', () => {
      expect(fp({ body: Buffer.from('[1.0]'), contentType: undefined }, b)).not.toBe(
        fp({ body: Buffer.from('[1]'), contentType: undefined }, b),
      );
    });

    it('does not let a JSON body collide with the same text sent as bytes', () => {
      const canonical = '{"a":1}';
      expect(fp(jsonBody(canonical), b)).not.toBe(
        fp({ body: Buffer.from(canonical), contentType: 'text/plain' }, b),
      );
    });

    it('hashes invalid JSON with a JSON content type as bytes, without throwing', () => {
      const broken = Buffer.from('{"a":');
      expect(fp({ body: broken, contentType: 'application/json' }, b)).toBe(
        fp({ body: broken, contentType: 'text/plain' }, b),
      );
      expect(fp({ body: Buffer.from('{"a":1'), contentType: 'application/json' }, b)).not.toBe(
        fp({ body: broken, contentType: 'application/json' }, b),
      );
    });

    it('hashes non-UTF-8 bytes with a JSON content type as bytes', () => {
      const a = Buffer.from([0x22, 0xff, 0x22]);
      const c = Buffer.from([0x22, 0xfe, 0x22]);
      expect(fp({ body: a }, b)).not.toBe(fp({ body: c }, b));
    });

    it('hashes an empty body as empty whatever the content type', () => {
      const empty = Buffer.alloc(0);
      expect(fp({ body: empty, contentType: 'application/json' }, b)).toBe(
        fp({ body: empty, contentType: undefined }, b),
      );
      expect(fp({ body: empty }, b)).not.toBe(fp(jsonBody('""'), b));
    });

    it('does not treat +json look-alikes as JSON', () => {
      expect(isJsonContentType('text/json')).toBe(false);
      expect(isJsonContentType('application/jsonx')).toBe(false);
      expect(isJsonContentType('+json')).toBe(false);
      expect(isJsonContentType('application/+json')).toBe(false);
      expect(isJsonContentType('application/x-json-stream')).toBe(false);
      expect(isJsonContentType(undefined)).toBe(false);
    });
  });

  describe('ignore', () => {
    const ignoring = policy([{ kind: 'body' }], [['meta', 'sent_at']]);

    it('does not change when an ignored field changes', () => {
      expect(fp(jsonBody('{"a":1,"meta":{"sent_at":"t1"}}'), ignoring)).toBe(
        fp(jsonBody('{"a":1,"meta":{"sent_at":"t2"}}'), ignoring),
      );
    });

    it('treats a missing ignored field like a present one', () => {
      expect(fp(jsonBody('{"a":1,"meta":{}}'), ignoring)).toBe(
        fp(jsonBody('{"a":1,"meta":{"sent_at":1}}'), ignoring),
      );
    });

    it('changes when a non-ignored field changes', () => {
      expect(fp(jsonBody('{"a":1,"meta":{"sent_at":"t1"}}'), ignoring)).not.toBe(
        fp(jsonBody('{"a":2,"meta":{"sent_at":"t1"}}'), ignoring),
      );
    });

    it('does not apply to a body hashed as bytes', () => {
      const text = (s: string): Partial<FingerprintInput> => ({
        body: Buffer.from(s),
        contentType: 'text/plain',
      });
      expect(fp(text('{"meta":{"sent_at":1}}'), ignoring)).not.toBe(
        fp(text('{"meta":{"sent_at":2}}'), ignoring),
      );
    });
  });

  describe('body-field', () => {
    const amount = policy([{ kind: 'body-field', path: ['payment', 'amount'] }]);

    it('hashes only the field', () => {
      expect(fp(jsonBody('{"payment":{"amount":1,"note":"x"}}'), amount)).toBe(
        fp(jsonBody('{"payment":{"note":"y","amount":1.0}}'), amount),
      );
      expect(fp(jsonBody('{"payment":{"amount":1}}'), amount)).not.toBe(
        fp(jsonBody('{"payment":{"amount":2}}'), amount),
      );
    });

    it('distinguishes an absent field from a null one', () => {
      expect(fp(jsonBody('{"payment":{}}'), amount)).not.toBe(
        fp(jsonBody('{"payment":{"amount":null}}'), amount),
      );
    });

    it('treats a non-JSON body as having no field', () => {
      expect(fp({ body: Buffer.from('nope'), contentType: 'text/plain' }, amount)).toBe(
        fp(jsonBody('{}'), amount),
      );
    });

    it('reads the field whatever the content type, since upstreams often parse JSON regardless', () => {
      expect(
        fp({ body: Buffer.from('{"payment":{"amount":1}}'), contentType: 'text/plain' }, amount),
      ).toBe(fp(jsonBody('{"payment":{"amount":1}}'), amount));
    });

    it('applies ignore inside the field and treats an ignored field as absent', () => {
      const p = policy([{ kind: 'body-field', path: ['payment'] }], [['payment', 'at']]);
      expect(fp(jsonBody('{"payment":{"amount":1,"at":1}}'), p)).toBe(
        fp(jsonBody('{"payment":{"amount":1,"at":2}}'), p),
      );
      const ignored = policy([{ kind: 'body-field', path: ['payment', 'at'] }], [['payment']]);
      expect(fp(jsonBody('{"payment":{"at":1}}'), ignored)).toBe(fp(jsonBody('{}'), ignored));
    });

    it('includes the field path, so different fields with equal values differ', () => {
      const a = policy([{ kind: 'body-field', path: ['a'] }]);
      const b = policy([{ kind: 'body-field', path: ['b'] }]);
      expect(fp(jsonBody('{"a":1,"b":1}'), a)).not.toBe(fp(jsonBody('{"a":1,"b":1}'), b));
    });
  });

  describe('header', () => {
    const h = policy([{ kind: 'header', name: 'x-run-id' }]);

    it('hashes the header value', () => {
      expect(fp({ headers: { 'x-run-id': 'a' } }, h)).not.toBe(
        fp({ headers: { 'x-run-id': 'b' } }, h),
      );
      expect(fp({ headers: { 'x-run-id': 'a', other: 'x' } }, h)).toBe(
        fp({ headers: { 'x-run-id': 'a' } }, h),
      );
    });

    it('distinguishes an absent header from an empty one', () => {
      expect(fp({ headers: {} }, h)).not.toBe(fp({ headers: { 'x-run-id': '' } }, h));
    });

    it('hashes repeated values (arrays) in order, distinct from one joined value', () => {
      const multi = policy([{ kind: 'header', name: 'set-cookie' }]);
      expect(fp({ headers: { 'set-cookie': ['a', 'b'] } }, multi)).not.toBe(
        fp({ headers: { 'set-cookie': ['b', 'a'] } }, multi),
      );
      expect(fp({ headers: { 'set-cookie': ['a', 'b'] } }, multi)).not.toBe(
        fp({ headers: { 'set-cookie': ['ab'] } }, multi),
      );
    });

    it('frames values so two headers cannot trade characters', () => {
      const two = policy([
        { kind: 'header', name: 'x-a' },
        { kind: 'header', name: 'x-b' },
      ]);
      expect(fp({ headers: { 'x-a': 'xy', 'x-b': '' } }, two)).not.toBe(
        fp({ headers: { 'x-a': 'x', 'x-b': 'y' } }, two),
      );
    });
  });

  describe('query-param', () => {
    const qp = policy([{ kind: 'query-param', name: 'run' }]);

    it('hashes the parameter values in order', () => {
      expect(fp({ query: 'run=1&x=2' }, qp)).toBe(fp({ query: 'x=3&run=1' }, qp));
      expect(fp({ query: 'run=1&run=2' }, qp)).not.toBe(fp({ query: 'run=2&run=1' }, qp));
    });

    it('distinguishes an absent parameter from an empty one', () => {
      expect(fp({ query: '' }, qp)).not.toBe(fp({ query: 'run=' }, qp));
    });

    it('matches a percent-encoded name', () => {
      expect(fp({ query: '%72un=1' }, qp)).toBe(fp({ query: 'run=1' }, qp));
    });
  });

  describe('properties', () => {
    type Json = string | number | boolean | null | Json[] | { [key: string]: Json };
    type Path = string[];

    /** Paths to every object member (arrays are not indexed, as ignore paths are not). */
    function memberPaths(value: unknown, prefix: Path = []): Path[] {
      if (typeof value !== 'object' || value === null || Array.isArray(value)) return [];
      return Object.keys(value).flatMap((key) => [
        [...prefix, key],
        ...memberPaths((value as Record<string, unknown>)[key], [...prefix, key]),
      ]);
    }

    function setAt(root: Record<string, Json>, path: Path, value: Json): Record<string, Json> {
      const copy = structuredClone(root);
      let node: Record<string, Json> = copy;
      for (const key of path.slice(0, -1)) node = node[key] as Record<string, Json>;
      Object.defineProperty(node, path[path.length - 1] as string, {
        value,
        enumerable: true,
        writable: true,
        configurable: true,
      });
      return copy;
    }

    const object = fc.dictionary(
      fc.string({ maxLength: 4 }),
      fc.jsonValue({ maxDepth: 3 }) as fc.Arbitrary<Json>,
      {
        minKeys: 1,
        maxKeys: 6,
      },
    );
    const body = policy([{ kind: 'body' }], [['meta', 'sent_at']]);
    const json = (value: unknown): Partial<FingerprintInput> => jsonBody(JSON.stringify(value));

    it('changes whenever a non-ignored field changes', () => {
      fc.assert(
        fc.property(
          object,
          fc.nat(),
          fc.jsonValue({ maxDepth: 2 }) as fc.Arbitrary<Json>,
          (root, pick, replacement) => {
            const paths = memberPaths(root).filter((p) => !(p[0] === 'meta' && p[1] === 'sent_at'));
            fc.pre(paths.length > 0);
            const path = paths[pick % paths.length] as Path;
            const changed = setAt(root, path, replacement);
            fc.pre(canonicalJson(JSON.stringify(changed)) !== canonicalJson(JSON.stringify(root)));
            expect(fp(json(changed), body)).not.toBe(fp(json(root), body));
          },
        ),
      );
    });

    it('does not change when only an ignored field changes', () => {
      fc.assert(
        fc.property(
          object,
          fc.jsonValue() as fc.Arbitrary<Json>,
          fc.jsonValue() as fc.Arbitrary<Json>,
          (root, first, second) => {
            const meta = { ...(root as Record<string, Json>), meta: { sent_at: first, kept: 1 } };
            const other = { ...meta, meta: { kept: 1, sent_at: second } };
            expect(fp(json(other), body)).toBe(fp(json(meta), body));
          },
        ),
      );
    });

    it('collides two path + query inputs only when path and decoded query pairs are equal', () => {
      const q = policy([{ kind: 'path' }, { kind: 'query' }]);
      const word = fc.string({
        unit: fc.constantFrom('a', 'b', '=', '&', '/', '+', '%20'),
        maxLength: 5,
      });
      const decoded = (query: string): string =>
        JSON.stringify(
          canonicalQueryPairs(query).map(([n, v]) => [n.toString('hex'), v.toString('hex')]),
        );
      fc.assert(
        fc.property(word, word, word, word, (pathA, queryA, pathB, queryB) => {
          const same =
            fp({ path: `/${pathA}`, query: queryA }, q) ===
            fp({ path: `/${pathB}`, query: queryB }, q);
          expect(same).toBe(pathA === pathB && decoded(queryA) === decoded(queryB));
        }),
      );
    });
  });
});

describe('FramedHash', () => {
  // Each field framed the plain way: an 8-byte big-endian byte length, then its UTF-8 bytes.
  const reference = (fields: readonly (string | Buffer)[]): Buffer =>
    Buffer.concat(
      fields.flatMap((value) => {
        const bytes = typeof value === 'string' ? Buffer.from(value, 'utf8') : value;
        const length = Buffer.alloc(8);
        length.writeBigUInt64BE(BigInt(bytes.length));
        return [length, bytes];
      }),
    );
  const field = fc.oneof(
    fc.string({ maxLength: 100 }),
    fc.string({ unit: 'grapheme', maxLength: 100 }),
    fc.string({ unit: 'binary', maxLength: 100 }),
    fc.uint8Array({ maxLength: 100 }).map((bytes) => Buffer.from(bytes)),
  );

  it('frames short and long, ASCII and other fields as length-prefixed UTF-8 bytes', () => {
    fc.assert(
      fc.property(fc.array(field, { maxLength: 12 }), (fields) => {
        const framed = new FramedHash('test');
        for (const value of fields) framed.field(value);
        expect(framed.framed().equals(reference(['idempotency-proxy/test', ...fields]))).toBe(true);
      }),
    );
  });

  it('writes every byte of a length past 16 bits and past 24 bits', () => {
    for (const size of [0x1_0203, 0x102_0304]) {
      const big = Buffer.alloc(size, 7);
      const framed = new FramedHash('test').field(big).field('x'.repeat(size)).framed();
      expect(framed.equals(reference(['idempotency-proxy/test', big, 'x'.repeat(size)]))).toBe(
        true,
      );
    }
  });
});

describe('stability across versions', () => {
  // Records outlive a deploy: a build that hashed the same request differently would answer every
  // repeat stored by the previous build with 422 (fingerprints), or miss its record (derived keys,
  // tenants). These digests were computed by the build that stored records before this one.
  const input: FingerprintInput = {
    method: 'POST',
    path: '/refunds/ä',
    query: 'b=2&a=1&a=%FF',
    headers: { 'x-team': ['a', 'b'], authorization: 'Bearer t' },
    body: Buffer.from('{"amount":49.99,"order":{"id":"o1"},"n":12345678901234567890}'),
    contentType: 'application/json',
  };
  const parts: RequestPart[] = [
    ...ALL_PARTS,
    { kind: 'body-field', path: ['order', 'id'] },
    { kind: 'header', name: 'x-team' },
    { kind: 'query-param', name: 'a' },
  ];

  it.each([
    ['every part', [], input, '370caf86c641ef9b90139b6184dcc65e392592cf3965957d95ab3419da389aa7'],
    [
      'an ignored field',
      [['amount']],
      input,
      'cda3bbd4dcb0cc1264bbcd991fd5099336dda9801effdcb49cb48ec462408c3f',
    ],
    [
      'a body of bytes',
      [],
      { ...input, body: Buffer.from([0xff, 0, 1]), contentType: 'application/octet-stream' },
      '6c34f1a515eb6286ec0d44227d0a7923a6dff73f471b59d1ffa54127458d481a',
    ],
  ])('fingerprints %s as before', (_name, ignore, request, expected) => {
    expect(computeFingerprint(request, { parts, ignore }).toString('hex')).toBe(expected);
  });

  it('derives keys and tenant scopes as before', () => {
    expect(deriveKey([{ kind: 'body' }], input, [])).toBe(
      'derived:p6P-iIj_1mczDmdHLyPtUTG3p7a7hgqDi7NHUB5vBJg',
    );
    expect(tenantHash(input.headers, ['header:authorization', 'header:x-team'])).toBe(
      '0e038c7a23f2400eb7e7e277f6bdab95f47bf309e4a5a55ef6d979b87611efe6',
    );
  });
});
