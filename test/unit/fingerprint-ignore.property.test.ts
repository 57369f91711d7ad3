// Property tests over random JSON bodies: `fingerprint.ignore` paths never change the
// fingerprint or a derived key, every other change does, and the JSON spelling (key order,
// whitespace, number formatting, \u escapes) never matters. The oracle is deliberately simple and
// independent of canonical-json.ts: JSON.parse, drop the ignored paths, serialise with sorted keys.
import fc from 'fast-check';
import type { RequestPart } from '../../src/config/types';
import { deriveKey } from '../../src/idempotency/derived-key';
import { computeFingerprint, type FingerprintInput } from '../../src/idempotency/fingerprint';

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type JsonObject = { [key: string]: Json };
type Path = readonly string[];

const BODY: RequestPart[] = [{ kind: 'body' }];
const ALL: RequestPart[] = [
  { kind: 'method' },
  { kind: 'path' },
  { kind: 'query' },
  { kind: 'body' },
];

function input(text: string): FingerprintInput {
  return {
    method: 'POST',
    path: '/refunds',
    query: 'a=1',
    headers: { 'x-run-id': 'run-1' },
    body: Buffer.from(text, 'utf8'),
    contentType: 'application/json',
  };
}

/** The fingerprint and the derived keys a route could compute for this body text. */
function hashes(text: string, ignore: Path[], field: Path): string[] {
  const request = input(text);
  return [
    computeFingerprint(request, { parts: ALL, ignore }).toString('hex'),
    deriveKey(BODY, request, ignore),
    deriveKey(
      [
        { kind: 'body-field', path: field },
        { kind: 'header', name: 'x-run-id' },
      ],
      request,
      ignore,
    ),
  ];
}

// ---- the oracle ---------------------------------------------------------------------------------

function isObject(value: Json | undefined): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The value with every ignored path removed (paths name object members only; arrays are not entered). */
function strip(value: Json, ignore: Path[], at: Path = []): Json {
  if (!isObject(value)) return value;
  const out: JsonObject = {};
  for (const key of Object.keys(value)) {
    const path = [...at, key];
    if (ignore.some((p) => p.length === path.length && p.every((s, i) => s === path[i]))) continue;
    Object.defineProperty(out, key, {
      value: strip(value[key] as Json, ignore, path),
      enumerable: true,
      writable: true,
      configurable: true,
    });
  }
  return out;
}

function sorted(value: Json): string {
  if (Array.isArray(value)) return `[${value.map(sorted).join(',')}]`;
  if (!isObject(value)) return JSON.stringify(value);
  const keys = Object.keys(value).sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${sorted(value[k] as Json)}`).join(',')}}`;
}

const sameAfterIgnore = (a: Json, b: Json, ignore: Path[]): boolean =>
  sorted(strip(a, ignore)) === sorted(strip(b, ignore));

// ---- random bodies, paths and changes -----------------------------------------------------------

/** A few fixed names so generated ignore paths often hit generated members, plus any text. */
const memberName = fc.oneof(
  fc.constantFrom(
    'a',
    'b',
    'id',
    'sent_at',
    'meta',
    'trace_id',
    'é',
    'ü\u00ad',
    '"q"',
    '__proto__',
  ),
  fc.string({ maxLength: 3, unit: 'grapheme' }),
);
const leaf: fc.Arbitrary<Json> = fc.oneof(
  fc.constant(null),
  fc.boolean(),
  fc.integer(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.bigInt({ min: -(10n ** 25n), max: 10n ** 25n }).map((n) => Number(n)),
  fc.string({ maxLength: 6, unit: 'grapheme' }),
);
const { json } = fc.letrec<{ json: Json; object: JsonObject }>((tie) => ({
  json: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    leaf,
    tie('object'),
    fc.array(tie('json'), { maxLength: 3 }),
  ),
  object: fc
    .uniqueArray(fc.tuple(memberName, tie('json')), { maxLength: 4, selector: ([name]) => name })
    .map((entries) => {
      const object: JsonObject = {};
      for (const [name, value] of entries) {
        Object.defineProperty(object, name, {
          value,
          enumerable: true,
          writable: true,
          configurable: true,
        });
      }
      return object;
    }),
}));
const root = json.filter(isObject) as fc.Arbitrary<JsonObject>;

/** Paths to every object member, arrays not entered (as ignore paths never enter them). */
function memberPaths(value: Json, at: Path = []): Path[] {
  if (!isObject(value)) return [];
  return Object.keys(value).flatMap((key) => [
    [...at, key],
    ...memberPaths(value[key] as Json, [...at, key]),
  ]);
}

function valueAt(value: Json, path: Path): Json | undefined {
  let node: Json | undefined = value;
  for (const segment of path) {
    if (!isObject(node) || !Object.hasOwn(node, segment)) return undefined;
    node = node[segment];
  }
  return node;
}

/** A copy with the member at `path` set to `replacement`, or deleted when it is undefined; null when its parent is not an object. */
function withChange(
  value: JsonObject,
  path: Path,
  replacement: Json | undefined,
): JsonObject | null {
  const copy = JSON.parse(JSON.stringify(value)) as JsonObject;
  const parent = valueAt(copy, path.slice(0, -1));
  if (!isObject(parent)) return null;
  const name = path[path.length - 1]!;
  if (replacement === undefined) delete parent[name];
  else
    Object.defineProperty(parent, name, {
      value: replacement,
      enumerable: true,
      writable: true,
      configurable: true,
    });
  return copy;
}

/** Ignore paths: some existing members (any depth), and some that name nothing yet. */
function ignoreArbitrary(value: JsonObject): fc.Arbitrary<Path[]> {
  const existing = memberPaths(value);
  const fresh = fc.array(memberName, { minLength: 1, maxLength: 3 });
  const pick = existing.length > 0 ? fc.oneof(fc.constantFrom(...existing), fresh) : fresh;
  return fc.array(pick, { minLength: 1, maxLength: 4 });
}

/** A field some derive part reads: an existing member path, or one naming nothing. */
function fieldArbitrary(value: JsonObject): fc.Arbitrary<Path> {
  const existing = memberPaths(value);
  const fresh = fc.array(memberName, { minLength: 1, maxLength: 2 });
  return existing.length > 0 ? fc.oneof(fc.constantFrom(...existing), fresh) : fresh;
}

// ---- spelling the same JSON differently ---------------------------------------------------------

/** mulberry32: a seeded PRNG, so a failing case replays from fast-check's seed. */
function prng(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

const choose = <T>(random: () => number, options: readonly T[]): T =>
  options[Math.floor(random() * options.length)] as T;

const space = (random: () => number): string => choose(random, ['', '', ' ', '\n', '\t', '\r\n  ']);

/** Another spelling of the same number: trailing zeros, a decimal point moved into an exponent. */
function respell(text: string, random: () => number): string {
  const match = /^(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/.exec(text);
  if (match === null) throw new Error(`not a JSON number: ${text}`);
  const sign = match[1]!;
  const fraction = match[3] ?? '';
  let digits = (match[2]! + fraction).replace(/^0+(?=\d)/, '');
  let exponent = Number(match[4] ?? 0) - fraction.length;
  if (/^0+$/.test(digits)) return sign + choose(random, ['0', '0.0', '0e7', '0.000E-2']);
  const zeros = Math.floor(random() * 3);
  digits += '0'.repeat(zeros);
  exponent -= zeros;
  const e = choose(random, ['e', 'E']);
  const scientific = `${digits}${e}${exponent >= 0 && random() < 0.5 ? '+' : ''}${exponent}`;
  if (random() < 0.4) return sign + scientific;
  if (exponent >= 0 && exponent <= 25) return sign + digits + '0'.repeat(exponent);
  if (exponent < 0 && -exponent < digits.length) {
    const point = digits.length + exponent;
    return `${sign}${digits.slice(0, point)}.${digits.slice(point)}`;
  }
  if (exponent < 0 && -exponent <= 30)
    return `${sign}0.${'0'.repeat(-exponent - digits.length)}${digits}`;
  return sign + scientific;
}

const SHORT_ESCAPES: Record<string, string> = {
  '"': '\\"',
  '\\': '\\\\',
  '\b': '\\b',
  '\f': '\\f',
  '\n': '\\n',
  '\r': '\\r',
  '\t': '\\t',
};

/** A JSON string literal with some characters written as \u escapes (surrogate pairs kept whole). */
function quote(text: string, random: () => number): string {
  let out = '"';
  for (const char of text) {
    const mustEscape = char === '"' || char === '\\' || char.charCodeAt(0) < 0x20;
    if (!mustEscape && random() < 0.6) {
      out += char;
    } else if (SHORT_ESCAPES[char] !== undefined && random() < 0.5) {
      out += SHORT_ESCAPES[char];
    } else {
      for (let i = 0; i < char.length; i++) {
        const unit = char.charCodeAt(i).toString(16).padStart(4, '0');
        out += `\\u${random() < 0.5 ? unit : unit.toUpperCase()}`;
      }
    }
  }
  return `${out}"`;
}

function spell(value: Json, random: () => number): string {
  if (value === null || typeof value === 'boolean') return String(value);
  if (typeof value === 'number') return respell(JSON.stringify(value), random);
  if (typeof value === 'string') return quote(value, random);
  if (Array.isArray(value)) {
    const items = value.map((item) => space(random) + spell(item, random) + space(random));
    return `[${items.join(',') || space(random)}]`;
  }
  const keys = Object.keys(value).sort(() => random() - 0.5);
  const members = keys.map(
    (key) =>
      `${space(random)}${quote(key, random)}${space(random)}:${space(random)}${spell(value[key] as Json, random)}${space(random)}`,
  );
  return `{${members.join(',') || space(random)}}`;
}

// ---- the properties -----------------------------------------------------------------------------

const RUNS = { numRuns: 300 };

describe('fingerprint.ignore over random JSON bodies', () => {
  it('leaves the fingerprint and derived keys unchanged when only ignored fields change, appear or disappear', () => {
    fc.assert(
      fc.property(
        root.chain((body) =>
          fc.tuple(
            fc.constant(body),
            ignoreArbitrary(body),
            fieldArbitrary(body),
            fc.nat(),
            fc.option(json),
          ),
        ),
        ([body, ignore, field, pick, replacement]) => {
          const target = ignore[pick % ignore.length]!;
          const changed = withChange(body, target, replacement ?? undefined);
          fc.pre(changed !== null);
          expect(hashes(JSON.stringify(changed), ignore, field)).toEqual(
            hashes(JSON.stringify(body), ignore, field),
          );
        },
      ),
      RUNS,
    );
  });

  it('changes the fingerprint and the body-derived key exactly when a field outside the ignored ones changes', () => {
    fc.assert(
      fc.property(
        root.chain((body) =>
          fc.tuple(fc.constant(body), ignoreArbitrary(body), fc.nat(), fc.option(json)),
        ),
        ([body, ignore, pick, replacement]) => {
          const paths = memberPaths(body);
          fc.pre(paths.length > 0);
          const changed = withChange(body, paths[pick % paths.length]!, replacement ?? undefined);
          fc.pre(changed !== null);
          const [fingerprintA, keyA] = hashes(JSON.stringify(body), ignore, ['id']);
          const [fingerprintB, keyB] = hashes(JSON.stringify(changed), ignore, ['id']);
          const same = sameAfterIgnore(body, changed!, ignore);
          expect(fingerprintA === fingerprintB).toBe(same);
          expect(keyA === keyB).toBe(same);
        },
      ),
      RUNS,
    );
  });

  it('separates two unrelated random bodies unless they agree outside the ignored fields', () => {
    fc.assert(
      fc.property(
        root,
        root,
        fc.array(fc.array(memberName, { minLength: 1, maxLength: 2 }), { maxLength: 3 }),
        (a, b, ignore) => {
          const [fingerprintA, keyA] = hashes(JSON.stringify(a), ignore, ['id']);
          const [fingerprintB, keyB] = hashes(JSON.stringify(b), ignore, ['id']);
          const same = sameAfterIgnore(a, b, ignore);
          expect(fingerprintA === fingerprintB).toBe(same);
          expect(keyA === keyB).toBe(same);
        },
      ),
      RUNS,
    );
  });

  it('ignores the spelling: key order, whitespace, number formatting and \\u escapes never change a hash', () => {
    fc.assert(
      fc.property(
        root.chain((body) =>
          fc.tuple(fc.constant(body), ignoreArbitrary(body), fieldArbitrary(body)),
        ),
        fc.integer(),
        ([body, ignore, field], seed) => {
          const random = prng(seed);
          const plain = JSON.stringify(body);
          const respelled = spell(body, random);
          expect(JSON.parse(respelled)).toEqual(JSON.parse(plain)); // the same document
          expect(hashes(respelled, ignore, field)).toEqual(hashes(plain, ignore, field));
        },
      ),
      RUNS,
    );
  });
});
